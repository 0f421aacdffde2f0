"""What the quality table says (research/studies/quality_table.py): the papers' claims and the issues'
targets checked on its rows, and ten validation examples side by side. Each function reads a
Table's rows (`rows`, `row(name)`), its extra results and settings; nothing here runs a model."""

from __future__ import annotations

import json
import os

from pgn_tf.utils.machine import CPU_EMULATIONS
from research.studies import targets

STAGES = ("lead", "baseline", "see", "seeds", "precision", "cpu_types", "paulus", "see_rl", "abs",
          "decode")
# debian_abs layer-normalises the convolutions (model.abs_conv_norm); the row of the encoder
# without it, kept in older results, is "rush2015 ABS (conv encoder)"
CONV_NORM_ROW = "rush2015 ABS (conv encoder, layer-normalised)"
COV = "see2017 pointer-generator + coverage"
# The precision stage's two arms: (row suffix, --set overrides), each stated in full so the
# comparison means the same whatever the presets' defaults are.
PRECISION_ARMS = (
    ("float32", ["train.mixed_precision=", "data.bucket_by_summary_length=false",
                 "data.buckets_per_length=0"]),
    ("bfloat16, bucketed by summary length", ["train.mixed_precision=mixed_bfloat16",
                                              "data.bucket_by_summary_length=true",
                                              "data.buckets_per_length=0"]),
)

# The cpu_types stage's two arms: (row suffix, --set overrides, environment). The first is what
# `auto` picks on the machine the study runs on; the second what a CPU without bf16 runs: float32
# forced under the speed tools' `--cpu avx2` caps (pgn_tf.utils.machine.CPU_EMULATIONS: oneDNN
# and MKL at AVX2; the PyTorch one does nothing to TensorFlow). The rest of an older chip, its clock and caches, no cap emulates:
# research/records/2026-11-28-cpu-emulation-check.md.
CPU_TYPE_ARMS = (
    ("auto (this CPU)", ["train.mixed_precision=auto"], {}),
    ("float32 forced, oneDNN capped at AVX2", ["train.mixed_precision="], CPU_EMULATIONS["avx2"]),
)


def ci_cell(r: dict, k: str) -> str:
    """A table cell: the figure k of row r with its 95% interval, when the row has one."""
    lo, hi = r.get(f"{k}_ci95") or (None, None)
    return f"{r[k]:.2f} [{lo:.2f}, {hi:.2f}]" if lo is not None else f"{r[k]:.2f}"


def table_md(table) -> str:
    """The table's markdown: a row per system, the stages' order."""
    cols = ["system", "ROUGE-1", "ROUGE-2", "ROUGE-Lsum", "dup 3-gram %",
            "repeat-word outputs %", "[UNK] outputs %", "raw [UNK] outputs %",
            "novel 2-gram %", "mean p_gen", "perplexity", "train min", "steps"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    ci = ci_cell
    order = {s: i for i, s in enumerate(STAGES)}
    for r in sorted(table.rows, key=lambda r: order.get(r.get("stage"), 99)):
        cells = [r["name"], ci(r, "rouge1"), ci(r, "rouge2"), ci(r, "rougeLsum"),
                 r.get("dup_3gram_pct", ""), r.get("repeat_word_outputs_pct", ""),
                 r.get("unk_outputs_pct", ""), r.get("raw_unk_outputs_pct", ""),
                 r.get("novel_2gram_pct", ""), r.get("mean_p_gen", ""),
                 r.get("perplexity", ""), r.get("train_minutes", ""),
                 r.get("train_steps", "")]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    ref = next((r.get("reference_repeat_word_pct") for r in table.rows
                if r.get("reference_repeat_word_pct") is not None), None)
    if ref is not None:
        lines.append(f"\nReferences: {ref}% of them repeat a word (word tokens, punctuation "
                     f"excluded).")
    return "\n".join(lines)


def curves_md(table) -> str:
    """The learning curves' markdown table (the see stage's run)."""
    curves = table.extra.get("curves") or []
    lines = ["| minutes | step | eval loss | validation ROUGE-1 | validation ROUGE-Lsum |",
             "|---|---|---|---|---|"]
    for c in curves:
        lines.append(f"| {c['minutes']} | {c['step']} | {c.get('loss', '')} | "
                     f"{c.get('rouge1', '')} | {c.get('rougeLsum', '')} |")
    return "\n".join(lines)


def claims(table) -> list[str]:
    """The papers' claims and the issues' targets, checked on the rows present."""
    r = table.row
    out = []

    def holds(ok):
        return "holds" if ok else "does not hold"

    def met(margin):
        return f"met by {margin:.2f}" if margin >= 0 else f"missed by {-margin:.2f}"

    base, pgn, cov = (r("see2017 baseline"), r("see2017 pointer-generator"), r(COV))
    ref_rep = next((x.get("reference_repeat_word_pct") for x in table.rows
                    if x.get("reference_repeat_word_pct") is not None), None)
    if base and pgn:
        out.append(
            f"pointer-generator beats the baseline (ROUGE-1 {pgn['rouge1']} vs "
            f"{base['rouge1']}) and says [UNK] less (raw {pgn.get('raw_unk_outputs_pct')}% vs "
            f"{base.get('raw_unk_outputs_pct')}% of outputs): "
            f"{holds(pgn['rouge1'] > base['rouge1'] and pgn.get('raw_unk_outputs_pct', 0) <= base.get('raw_unk_outputs_pct', 0))}")
    if pgn and cov:
        out.append(
            f"coverage reduces repetition (outputs repeating a word "
            f"{cov.get('repeat_word_outputs_pct')}% vs {pgn.get('repeat_word_outputs_pct')}%, "
            f"duplicate 3-grams {cov['dup_3gram_pct']}% vs {pgn['dup_3gram_pct']}%): "
            f"{holds(cov.get('repeat_word_outputs_pct', 0) < pgn.get('repeat_word_outputs_pct', 0))}")
    if cov:
        out.append(f"target: coverage ROUGE-1 >= {targets.COVERAGE_ROUGE1} at "
                   f"{table.settings().get('minutes')} minutes (it is {cov['rouge1']}): "
                   f"{met(cov['rouge1'] - targets.COVERAGE_ROUGE1)}")
        seeds = [x for x in table.rows if x.get("stage") == "seeds"]
        if len(seeds) == 2:
            spread = abs(seeds[0]["rouge1"] - seeds[1]["rouge1"])
            best20 = max(s["rouge1"] for s in seeds)
            out.append(f"target: coverage at the full budget above the short recipe by more "
                       f"than its seed spread ({cov['rouge1']} vs {best20}, spread "
                       f"{spread:.2f}): {met(cov['rouge1'] - best20 - spread)}")
        out.append(f"target: [UNK] in <= {targets.MAX_UNK_OUTPUTS_PCT:g}% of outputs "
                   f"({cov.get('unk_outputs_pct')}%): "
                   f"{met(targets.MAX_UNK_OUTPUTS_PCT - cov.get('unk_outputs_pct', 100))}")
        if ref_rep is not None:
            limit = targets.MAX_REPEAT_WORD_ABOVE_REFERENCES
            out.append(f"target: outputs repeating a word at most {limit:g} points above the "
                       f"references ({cov.get('repeat_word_outputs_pct')}% vs {ref_rep}%): "
                       f"{met(ref_rep + limit - cov.get('repeat_word_outputs_pct', 100))}")
        for x in table.rows:
            if x.get("stage") == "decode":
                out.append(f"decoding '{x['name'][len(COV) + 2:]}' vs the default: ROUGE-1 "
                           f"{x['rouge1']} vs {cov['rouge1']} ({x['rouge1'] - cov['rouge1']:+.2f}),"
                           f" repeat-word outputs {x.get('repeat_word_outputs_pct')}%")
    loss_row, avg_row = r(COV + " (best eval loss)"), r(COV + " (average of last 5)")
    if cov and loss_row and avg_row:
        out.append(f"model selection on the same run: best by validation ROUGE "
                   f"{cov['rouge1']}/{cov['rouge2']}/{cov['rougeLsum']}, by eval loss "
                   f"{loss_row['rouge1']}/{loss_row['rouge2']}/{loss_row['rougeLsum']}, average "
                   f"of the last 5 {avg_row['rouge1']}/{avg_row['rouge2']}/{avg_row['rougeLsum']}")
    test = table.extra.get("precision_test")
    arms = [x for x in table.rows if x.get("stage") == "precision"]
    if test and len(arms) == len(PRECISION_ARMS):
        (a, _), (b, _) = PRECISION_ARMS
        fp32, fast = (next(x for x in arms if x["name"].endswith(", " + arm)) for arm in (a, b))
        out.append(f"{b} vs {a} under the same budget: ROUGE-1 {fast['rouge1']} vs "
                   f"{fp32['rouge1']} in {fast.get('train_steps')} vs {fp32.get('train_steps')} "
                   f"steps; ROUGE-Lsum delta {test['delta']} [{test['delta_ci95'][0]}, "
                   f"{test['delta_ci95'][1]}], one-sided p = {test['p_value']:.4f}; not shown "
                   f"to cost ROUGE (the delta's 95% interval reaches 0): "
                   f"{holds(test['delta_ci95'][1] >= 0)} (CPU flags {test['cpu_flags']})")
    out += cpu_types_lines(table)
    for stage, label in (("paulus", "paulus2017"), ("see_rl", "see2017 + coverage")):
        ml, rl = r(f"{label}, ML continued"), r(f"{label}, ML+RL (mixed)")
        test = table.extra.get(f"{stage}_rl_test")
        if ml and rl and test:
            ok = test["p_value"] < targets.P_VALUE and test["delta"] > 0
            rep = rl.get("repeat_word_outputs_pct", 0) <= ml.get("repeat_word_outputs_pct", 0)
            out.append(
                f"target ({label}): mixed beats ML continued on ROUGE-L with p < "
                f"{targets.P_VALUE} "
                f"(ROUGE-Lsum {rl['rougeLsum']} vs {ml['rougeLsum']}, delta {test['delta']} "
                f"[{test['delta_ci95'][0]}, {test['delta_ci95'][1]}], one-sided p = "
                f"{test['p_value']:.4f})"
                f": {'met' if ok else 'missed'}; repeat-word outputs "
                f"{rl.get('repeat_word_outputs_pct')}% vs {ml.get('repeat_word_outputs_pct')}%: "
                f"{'met' if rep else 'missed'}")
    abs_rows = {e: r(f"rush2015 ABS ({e} encoder)") for e in ("bow", "conv", "attention")}
    # the convolutional encoder as debian_abs trains it now, where that row exists
    abs_rows["conv"] = r(CONV_NORM_ROW) or abs_rows["conv"]
    if all(abs_rows.values()):
        p = {e: x["perplexity"] for e, x in abs_rows.items()}
        out.append(f"ABS encoders order by perplexity bag-of-words > convolutional > "
                   f"attention ({p['bow']} > {p['conv']} > {p['attention']}): "
                   f"{holds(p['bow'] > p['conv'] > p['attention'])}")
    plus, lead8 = r("rush2015 ABS+ (attention)"), r("lead-8 words")
    if plus and lead8 and abs_rows["attention"]:
        absr = abs_rows["attention"]
        out.append(f"target: ABS+ ROUGE-1 above lead-8 ({plus['rouge1']} vs {lead8['rouge1']}):"
                   f" {met(plus['rouge1'] - lead8['rouge1'])}; ABS below ABS+ "
                   f"({absr['rouge1']}): {holds(absr['rouge1'] < plus['rouge1'])}; [UNK] in "
                   f"< {targets.ABS_PLUS_MAX_UNK_PCT:g}% of ABS+ outputs "
                   f"({plus.get('unk_outputs_pct')}%): "
                   f"{met(targets.ABS_PLUS_MAX_UNK_PCT - plus.get('unk_outputs_pct', 100))}")
    return out


def report(table) -> str:
    """10 validation examples side by side."""
    systems = [n for n in ("see2017 baseline", "see2017 pointer-generator", COV,
                           "paulus2017, ML+RL (mixed)", "rush2015 ABS+ (attention)")
               if table.row(n)]
    from pgn_tf.data.dataset import read_split

    examples = read_split(table.valid, None, 10)
    decoded = {}
    for name in systems:
        with open(table.row(name)["decoded"]) as f:
            decoded[name] = [json.loads(next(f))["decoded"] for _ in range(10)]
    out = ["# Ten validation examples side by side\n",
           f"![attention of PGN + coverage on example 1]({os.path.basename(table.attention_png)})"
           " (with the words: attention.html)\n"]
    for i, ex in enumerate(examples):
        out.append(f"## {i + 1}. `{ex.id}`\n\n**article:** {ex.article[:300]}...\n\n"
                   f"**reference:** {ex.summary}\n")
        out += [f"- **{s}:** {decoded[s][i]}" for s in systems]
        out.append("")
    return "\n".join(out)


def cpu_types_lines(table) -> list[str]:
    """The cpu_types stage side by side: each arm's precision as run, steps and ROUGE, and the
    paired test (one-sided) of the first arm over the second."""
    test = table.extra.get("cpu_types_test")
    arms = [x for x in table.rows if x.get("stage") == "cpu_types"]
    rows = {a: x for a, _, _ in CPU_TYPE_ARMS for x in arms if x["name"].endswith(", " + a)}
    if not test or len(rows) != len(CPU_TYPE_ARMS):
        return []
    out = [f"{arm}: {r.get('precision')} in {r.get('train_steps')} steps, ROUGE-1/2/Lsum "
           f"{r['rouge1']}/{r['rouge2']}/{r['rougeLsum']}" for arm, r in rows.items()]
    (a, _, _), (b, _, _) = CPU_TYPE_ARMS
    out.append(f"{a} vs {b}, the same recipe and budget: ROUGE-Lsum delta {test['delta']} "
               f"[{test['delta_ci95'][0]}, {test['delta_ci95'][1]}], one-sided p = "
               f"{test['p_value']:.4f} (CPU flags {test['cpu_flags']})")
    return out
