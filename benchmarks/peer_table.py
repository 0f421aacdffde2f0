"""The comparison's table: the two systems' figures side by side, their ratios, and the rows of
this project's variants (benchmarks.compare_peer prints them)."""

from __future__ import annotations

from benchmarks.peer import BATCH, BEAM

# The table's rows: (key in the figures, label).
ROWS = (
    ("train_src_tokens_per_sec", "training source tokens/s"),
    ("train_examples_per_sec", "training examples/s"),
    ("train_sec_per_step", "training s/step"),
    ("params", "parameters"),
    ("decode_articles_per_sec", f"decoding articles/s (beam {BEAM}, batch {BATCH})"),
    ("decode_mean_tokens", "decoded summary tokens (mean)"),
    ("decode_tokens_per_sec", "decoded tokens/s (articles/s x mean tokens)"),
    ("train_peak_rss_mib", "training peak RSS (MiB)"),
    ("decode_peak_rss_mib", "decoding peak RSS (MiB)"),
)



def fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 100:
        return f"{value:,.1f}"
    return f"{value:.2f}" if abs(value) >= 1 else f"{value:.3f}"


def with_token_rate(figures: dict) -> dict:
    """figures with decode_tokens_per_sec added where articles/s and mean tokens are known:
    the two systems' summaries can differ in length several times over (a model early in
    training loops to the length limit), and a search's cost grows with its steps, so
    articles/s alone compares unlike work."""
    rate, tokens = figures.get("decode_articles_per_sec"), figures.get("decode_mean_tokens")
    if rate is None or tokens is None:
        return figures
    return dict(figures, decode_tokens_per_sec=round(rate * tokens, 1))


def ratios(mine: dict, peer: dict) -> dict:
    """{row key: pgn_tf / OpenNMT-py} where both have the figure."""
    return {key: round(mine[key] / peer[key], 3) for key, _ in ROWS
            if mine.get(key) is not None and peer.get(key)}


def table(mine: dict, peer: dict, ratio: dict) -> str:
    width = max(len(label) for _, label in ROWS)
    lines = [f"{'':{width}}  {'pgn_tf':>12}  {'OpenNMT-py':>12}  {'ratio':>7}"]
    for key, label in ROWS:
        r = f"{ratio[key]:.2f}x" if key in ratio else "-"
        lines.append(f"{label:{width}}  {fmt(mine.get(key)):>12}  {fmt(peer.get(key)):>12}  "
                     f"{r:>7}")
    return "\n".join(lines)


def variant_table(variants: dict, default: dict, peer: dict) -> str:
    """One line per variant: its training source tokens/s, and its ratios to the reference's
    and to this project's default."""
    lines, vs_peer = [], peer.get("train_src_tokens_per_sec")
    for name, t in variants.items():
        r_peer = f"{t['src_tokens_per_sec'] / vs_peer:.2f}x the reference" if vs_peer else ""
        lines.append(f"variant {name}: {fmt(t['src_tokens_per_sec'])} source tokens/s, "
                     f"{t['sec_per_step']} s/step ({t['precision']}), "
                     f"{t['src_tokens_per_sec'] / default['src_tokens_per_sec']:.2f}x the "
                     f"default {r_peer}".rstrip())
    return "\n".join(lines)


def decode_variant_table(default: dict, peer: dict) -> str:
    """One line per decoding variant (compare_peer --decode_variant): its articles/s, its
    ratios to the reference's and to this project's default, the share of its summaries
    that are the default's, and its peak RSS."""
    lines, vs_peer = [], peer.get("decode_articles_per_sec")
    for name, d in default["variants"].items():
        r_peer = f", {d['articles_per_sec'] / vs_peer:.2f}x the reference" if vs_peer else ""
        lines.append(f"decode variant {name}: {fmt(d['articles_per_sec'])} articles/s "
                     f"(rounds {d['rounds_articles_per_sec']}), "
                     f"{d['articles_per_sec'] / default['articles_per_sec']:.2f}x the default "
                     f"({fmt(default['articles_per_sec'])}, rounds "
                     f"{default['rounds_articles_per_sec']}){r_peer}; "
                     f"{d['identical_to_default_pct']}% of its summaries the default's; "
                     f"peak RSS {fmt(d.get('peak_rss_mib'))} MiB")
    return "\n".join(lines)
