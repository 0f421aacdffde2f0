"""Render the results tables from the data files beside the dated records.

Each figure is written once, in a JSON file beside the record that measured it
(`research/records/NAME.json` beside `NAME.md`); README.md, docs/results/index.md and, where it
has the markers, docs/performance.md show tables rendered from those files between marker lines
(`<!-- NAME:begin -->` ... `<!-- NAME:end -->`). A table edited by hand would drift from its
record; `--check` says so (exit 1) and the test suite runs the same check.

    python -m tools.render_results           # rewrite the tables
    python -m tools.render_results --check   # exit 1 if a committed table differs
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RECORDS = Path("research/records")

DESCRIPTIONS = "debian-descriptions"
DIGESTS = "debian-digests"
CORPORA = (DESCRIPTIONS, DIGESTS)
PAPERS = ("lead baseline", "See et al. (2017)", "Paulus et al. (2017)", "Rush et al. (2015)",
          "OpenNMT-py")
CPUS = ("AVX2-only", "AVX512_BF16 as AVX2-only", "AVX512_BF16", "AMX")
CPU_LABELS = {
    "AVX2-only": "AVX2 only",
    "AVX512_BF16 as AVX2-only": "AVX512_BF16, run as AVX2 only (`--cpu avx2`)",
    "AVX512_BF16": "AVX512_BF16",
    "AMX": "AMX (amx_tile amx_bf16)",
}
SIZES = {DESCRIPTIONS: "descriptions (reference sizes)", DIGESTS: "digests (See et al.'s sizes)"}


class MarkerError(ValueError):
    """A page lacks the marker lines a table goes between: nothing is written anywhere."""


@dataclass(frozen=True)
class Row:
    """One row of a record's data file, with the record it comes from."""

    record: str  # the record's file name, NAME.md
    date: str  # the record's date
    order: int  # the row's position in its file
    data: dict

    @property
    def figures(self) -> dict:
        return self.data.get("figures", {})


def load_records(records_dir: Path) -> list[dict]:
    """Every data file in records_dir (a JSON object with `record` and `rows`), by name."""
    out = []
    for path in sorted(records_dir.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and "rows" in data and "record" in data:
            data["_path"] = path
            out.append(data)
    return out


def rows_of(records: list[dict], kind: str) -> list[Row]:
    """The rows of one kind ("quality" or "speed") across the records."""
    return [
        Row(record=rec["record"], date=rec["date"], order=i, data=row)
        for rec in records
        for i, row in enumerate(rec["rows"])
        if row.get("kind") == kind
    ]


def measures_of(records: list[dict]) -> dict[tuple[str, str], dict]:
    """The figures of the "measures" rows (measures computed later from a quality row's kept
    outputs, by the record that computed them), by the (record, source_name) of the quality row
    they measure."""
    return {(r.data["of_record"], r.data["of_source_name"]): r.figures
            for r in rows_of(records, "measures")}


def _rank(value: str, order: tuple[str, ...]) -> int:
    return order.index(value) if value in order else len(order)


def _num(value, spec: str = ".2f", suffix: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:{spec}}{suffix}"


def _link(row: Row, prefix: str) -> str:
    return f"[{row.date}]({prefix}{row.record})"


def _model(row: Row) -> str:
    note = row.data.get("note")
    return f"{row.data['model']}; {note}" if note else row.data["model"]


def _table(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    return "\n".join(lines)


def headline_table(records: list[dict], prefix: str) -> str:
    """The README's quality table: the recipe the README trains first (rows marked "recipe"),
    then each paper's best model and the lead baseline, per corpus; beside ROUGE, the measures
    RL is not trained on where a record computed them (measures_of)."""
    rows = [r for r in rows_of(records, "quality") if r.data.get("headline")]
    rows.sort(key=lambda r: (not r.data.get("recipe"), _rank(r.data["corpus"], CORPORA),
                             _rank(r.data["paper"], PAPERS), r.date, r.order))
    measures = measures_of(records)
    body = []
    for r in rows:
        m = measures.get((r.record, r.data.get("source_name")), {})
        body.append([r.data["paper"], _model(r), r.data.get("budget") or "-", r.data["corpus"],
                     _num(r.figures.get("rouge1")), _num(r.figures.get("rouge2")),
                     _num(r.figures.get("rougeLsum")),
                     _num(m.get("repeat_content_word_pct")), _num(m.get("fluency_ppl")),
                     _link(r, prefix)])
    return _table(["paper", "model", "budget on 2 CPU cores", "corpus", "ROUGE-1", "ROUGE-2",
                   "ROUGE-Lsum", "repeating a content word %", "fluency (perplexity)",
                   "record"], body)


def quality_table(records: list[dict], corpus: str, prefix: str) -> str:
    """Every quality row of one corpus, paper by paper, oldest record first."""
    rows = [r for r in rows_of(records, "quality") if r.data["corpus"] == corpus]
    rows.sort(key=lambda r: (_rank(r.data["paper"], PAPERS), r.date, r.record, r.order))
    header = ["paper", "model", "budget on 2 CPU cores", "ROUGE-1", "ROUGE-2", "ROUGE-Lsum"]
    digests = corpus == DIGESTS
    if digests:
        header += ["duplicate 3-grams %", "sentences repeated %", "blocks summarized %"]
    body = []
    for r in rows:
        f = r.figures
        cells = [r.data["paper"], _model(r), r.data.get("budget") or "-", _num(f.get("rouge1")),
                 _num(f.get("rouge2")), _num(f.get("rougeLsum"))]
        if digests:
            cells += [_num(f.get("dup_3gram_pct")), _num(f.get("repeated_sentence_pct")),
                      _num(f.get("block_match_pct"))]
        body.append(cells + [_link(r, prefix)])
    return _table(header + ["record"], body)


def latest_speed(records: list[dict]) -> list[Row]:
    """The latest run of each CPU type and corpus, as the commands run it (no training
    variant), and of each decoding setting measured apart (a row's `decode_variant`, such as
    decode.shortlist=2000: its own row, after the full vocabulary's). A row marked
    `"readme": false` (a point of a sweep, such as other shortlist sizes) is left to the runs
    table."""
    latest: dict[tuple[str, str, str], Row] = {}
    for r in rows_of(records, "speed"):
        if r.data.get("variant") or r.data.get("readme") is False:
            continue
        key = (r.data["cpu"], r.data["corpus"], r.data.get("decode_variant", ""))
        if key not in latest or r.data["run_date"] > latest[key].data["run_date"]:
            latest[key] = r
    return sorted(latest.values(), key=lambda r: (_rank(r.data["corpus"], CORPORA),
                                                  _rank(r.data["cpu"], CPUS),
                                                  r.data.get("decode_variant", "")))


def _output_layer(r: Row) -> str:
    """The decoding's output layer: the full vocabulary, or the decode setting it ran with."""
    v = r.data.get("decode_variant")
    return f"`{v}`" if v else "full vocabulary"


def _decoding(r: Row) -> str:
    if r.data.get("forced_length") is None:
        return "- (not forced: unequal summary lengths)"
    return _num(r.figures.get("decoding_ratio"), suffix="x")


def _forced(r: Row) -> str:
    forced = r.data.get("forced_length")
    return "not forced" if forced is None else f"{forced} tokens"


def speed_table(records: list[dict], prefix: str) -> str:
    """The README's speed table: pgn_tf / OpenNMT-py, the latest run of each CPU type."""
    body = [
        [CPU_LABELS.get(r.data["cpu"], r.data["cpu"]), SIZES[r.data["corpus"]], _forced(r),
         r.data["precision"], _num(r.figures.get("training_ratio"), suffix="x"),
         _output_layer(r), _decoding(r), _link(r, prefix)]
        for r in latest_speed(records)
    ]
    return _table(["CPU", "sizes", "decoding forced to", "pgn_tf precision",
                   "training tokens/s", "decoding's output layer", "decoding articles/s",
                   "record"], body)


def speed_runs_table(records: list[dict], prefix: str) -> str:
    """Every compare_peer run, by corpus and CPU type, oldest first."""
    rows = rows_of(records, "speed")
    rows.sort(key=lambda r: (_rank(r.data["corpus"], CORPORA), _rank(r.data["cpu"], CPUS),
                             r.data["run_date"]))
    body = []
    for r in rows:
        f = r.figures
        share = f.get("share_of_matmul_peak")
        body.append([
            CPU_LABELS.get(r.data["cpu"], r.data["cpu"]), SIZES[r.data["corpus"]], _forced(r),
            r.data["precision"], r.data.get("variant") or r.data.get("decode_variant") or "-",
            _num(f.get("training_ratio"), suffix="x"), _decoding(r),
            _num(f.get("decoding_peak_rss_ratio"), suffix="x"),
            "-" if share is None else f"{share * 100:.0f}%", r.data["run_date"], _link(r, prefix),
        ])
    return _table(["CPU", "sizes", "decoding forced to", "pgn_tf precision", "variant",
                   "training tokens/s", "decoding articles/s", "decoding peak RSS",
                   "training step, share of its matmul peak", "run", "record"], body)


def replace_between(text: str, name: str, body: str, where: str) -> str:
    """text with the lines between `<!-- name:begin -->` and `<!-- name:end -->` set to body."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < 0 or stop < start or text.count(begin) != 1 or text.count(end) != 1:
        raise MarkerError(
            f"{where}: needs one '{begin}' line followed by one '{end}' line for the {name} "
            "table; nothing was written")
    return text[:start + len(begin)] + "\n" + body + "\n" + text[stop:]


def _prefix(page: Path) -> str:
    """The relative link from page (repository-relative) to research/records/."""
    return "../" * (len(page.parts) - 1) + RECORDS.as_posix() + "/"


def _tables(records: list[dict], page: Path) -> dict[str, str]:
    prefix = _prefix(page)
    if page == Path("README.md"):
        return {"results": headline_table(records, prefix), "speed": speed_table(records, prefix)}
    if page == Path("docs/results/index.md"):
        return {"quality-descriptions": quality_table(records, DESCRIPTIONS, prefix),
                "quality-digests": quality_table(records, DIGESTS, prefix),
                "speed-runs": speed_runs_table(records, prefix)}
    return {"speed": speed_table(records, prefix)}


# The pages and whether each must hold its markers (docs/performance.md only if it has them).
PAGES = ((Path("README.md"), True), (Path("docs/results/index.md"), True),
         (Path("docs/performance.md"), False))


def render(root: Path) -> dict[Path, tuple[str, str]]:
    """Every page's (committed text, rendered text), keyed by repository-relative path.

    Raises MarkerError, before anything is written, when a page that must hold its markers
    does not."""
    records = load_records(root / RECORDS)
    out = {}
    for page, required in PAGES:
        path = root / page
        if not path.exists():
            if required:
                raise MarkerError(f"{page}: missing; nothing was written")
            continue
        text = path.read_text(encoding="utf-8")
        tables = _tables(records, page)
        if not required and not any(f"<!-- {n}:begin -->" in text for n in tables):
            continue
        new = text
        for name, body in tables.items():
            new = replace_between(new, name, body, str(page))
        out[page] = (text, new)
    return out


def stale(root: Path) -> list[Path]:
    """The pages whose committed tables differ from the rendered ones."""
    return [page for page, (old, new) in render(root).items() if old != new]


def write(root: Path) -> list[Path]:
    """Rewrite the tables; returns the pages changed."""
    pages = render(root)
    changed = []
    for page, (old, new) in pages.items():
        if old != new:
            (root / page).write_text(new, encoding="utf-8")
            changed.append(page)
    return changed


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tools.render_results", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if a committed table differs from its data")
    p.add_argument("--root", type=Path, default=REPO, help="the repository (default: this one)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.check:
            pages = stale(args.root)
            for page in pages:
                print(f"{page}: its tables differ from research/records/*.json; "
                      "run python -m tools.render_results")
            return 1 if pages else 0
        for page in write(args.root):
            print(f"rendered {page}")
    except MarkerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
