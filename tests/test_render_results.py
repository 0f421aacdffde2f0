"""The results tables are rendered from the data files beside the records: a committed table
that differs from its data fails here, and the renderer is checked on a small fixture."""

import json
from pathlib import Path

import pytest

from tools import render_results as rr

REPO = Path(__file__).resolve().parent.parent


def _quality(model, paper, corpus, r1, headline=False, **extra):
    row = {"kind": "quality", "corpus": corpus, "paper": paper, "model": model,
           "budget": "60 min", "figures": {"rouge1": r1, "rouge2": 20.0, "rougeLsum": r1 - 3}}
    if headline:
        row["headline"] = True
    row.update(extra)
    return row


def _speed(cpu, run_date, train, decode, variant="", forced=30, corpus=rr.DESCRIPTIONS,
           decode_variant=None):
    row = {"kind": "speed", "corpus": corpus, "cpu": cpu, "cpu_flags": "avx2",
           "run_date": run_date, "forced_length": forced, "precision": "float32",
           "variant": variant, "figures": {"training_ratio": train, "decoding_ratio": decode}}
    if decode_variant:
        row["decode_variant"] = decode_variant
    return row


def _record(root, name, date, rows):
    data = {"record": f"{name}.md", "date": date, "command": "python -m x", "commit": None,
            "cpu_flags": "avx2", "corpus": rr.DESCRIPTIONS, "rows": rows}
    (root / "research/records" / f"{name}.json").write_text(json.dumps(data))


PAGE = "# R\n\n<!-- {0}:begin -->\nold\n<!-- {0}:end -->\n\nprose after\n"


@pytest.fixture
def repo(tmp_path):
    (tmp_path / "research/records").mkdir(parents=True)
    (tmp_path / "docs/results").mkdir(parents=True)
    _record(tmp_path, "2026-01-01-a", "2026-01-01", [
        _quality("lead-10 words", "lead baseline", rr.DESCRIPTIONS, 31.0, headline=True),
        _quality("pgn", "See et al. (2017)", rr.DESCRIPTIONS, 47.0, headline=True),
        _quality("baseline", "See et al. (2017)", rr.DESCRIPTIONS, 30.0),
        _speed("AVX2-only", "2026-01-01 10:00 UTC", 1.5, 2.5),
    ])
    _record(tmp_path, "2026-01-02-b", "2026-01-02", [
        _speed("AVX2-only", "2026-01-02 09:00 UTC", 2.0, 2.75),
        _speed("AVX2-only", "2026-01-02 11:00 UTC", 2.2, 2.6, variant="decode.jit_step=true"),
        _speed("AVX2-only", "2026-01-02 09:00 UTC", None, 3.6,
               decode_variant="decode.shortlist=2000"),
        {**_speed("AVX2-only", "2026-01-02 09:00 UTC", None, 3.1,
                  decode_variant="decode.shortlist=5000"), "readme": False},
        _speed("AMX", "2026-01-02 12:00 UTC", 2.6, 9.0, forced=None, corpus=rr.DIGESTS),
        _quality("blocks", "lead baseline", rr.DIGESTS, 34.0, headline=True,
                 note="digits as '#'"),
    ])
    # a JSON file that is not a results data file is left alone
    (tmp_path / "research/records/other.json").write_text("[1, 2]")
    (tmp_path / "README.md").write_text(
        "# P\n\n<!-- results:begin -->\n<!-- results:end -->\n\ntext\n\n"
        "<!-- speed:begin -->\nhand-written\n<!-- speed:end -->\n")
    (tmp_path / "docs/results/index.md").write_text(
        "".join(PAGE.format(n) for n in ("quality-descriptions", "quality-digests",
                                         "speed-runs")))
    return tmp_path


def test_committed_tables_match_their_data():
    stale = rr.stale(REPO)
    assert stale == [], (f"{stale}: a table differs from research/records/*.json; "
                         "run python -m tools.render_results")


def test_every_data_file_sits_beside_its_record_and_names_its_source():
    records = rr.load_records(REPO / rr.RECORDS)
    assert records
    for rec in records:
        assert rec["_path"].with_suffix(".md").name == rec["record"]
        assert (REPO / rr.RECORDS / rec["record"]).exists()
        for key in ("date", "command", "commit", "cpu_flags", "corpus"):
            assert key in rec, (rec["record"], key)
        for row in rec["rows"]:
            assert row["kind"] in ("quality", "speed", "measures"), rec["record"]
            assert row["figures"], rec["record"]
            assert (REPO / row["source"]).exists(), (rec["record"], row["source"])


def test_headline_table_holds_the_marked_rows_by_corpus_then_paper(repo):
    table = rr.headline_table(rr.load_records(repo / rr.RECORDS), "research/records/")
    lines = table.splitlines()
    assert lines[0].startswith("| paper | model |")
    body = lines[2:]
    assert [line.split(" | ")[1] for line in body] == [
        "lead-10 words", "pgn", "blocks; digits as '#'"]
    assert "| baseline |" not in table
    assert "[2026-01-01](research/records/2026-01-01-a.md)" in body[0]
    assert "| 47.00 | 20.00 | 44.00 |" in body[1]


def test_the_recipe_comes_first_with_the_measures_a_later_record_computed(repo):
    """A "measures" row of a later record joins the quality row it measured, by that row's
    record and source name; a row marked "recipe" leads the table."""
    _record(repo, "2026-01-03-c", "2026-01-03", [
        _quality("recipe", "See et al. (2017)", rr.DESCRIPTIONS, 48.0, headline=True,
                 recipe=True, source_name="the recipe"),
        {"kind": "measures", "of_record": "2026-01-03-c.md", "of_source_name": "the recipe",
         "figures": {"repeat_content_word_pct": 2.5, "fluency_ppl": 70.25}},
    ])
    body = rr.headline_table(rr.load_records(repo / rr.RECORDS), "").splitlines()[2:]
    assert body[0].startswith("| See et al. (2017) | recipe |")
    assert "| 48.00 | 20.00 | 45.00 | 2.50 | 70.25 |" in body[0]
    assert "| 47.00 | 20.00 | 44.00 | - | - |" in body[2]  # no measures computed for it


def test_speed_table_takes_the_latest_run_of_each_cpu_type_without_variants(repo):
    records = rr.load_records(repo / rr.RECORDS)
    latest = rr.latest_speed(records)
    assert [(r.data["cpu"], r.data["run_date"], r.data.get("decode_variant")) for r in latest] \
        == [("AVX2-only", "2026-01-02 09:00 UTC", None),
            ("AVX2-only", "2026-01-02 09:00 UTC", "decode.shortlist=2000"),
            ("AMX", "2026-01-02 12:00 UTC", None)]
    table = rr.speed_table(records, "")
    assert "| 2.00x | full vocabulary | 2.75x |" in table
    assert "| - | `decode.shortlist=2000` | 3.60x |" in table  # its own row, decoding only
    assert "shortlist=5000" not in table  # a sweep's point: the runs table's only
    assert "not forced" in table and "9.00x" not in table  # unequal work is not a ratio


def test_speed_runs_table_lists_every_run_with_its_variant(repo):
    table = rr.speed_runs_table(rr.load_records(repo / rr.RECORDS), "../../research/records/")
    assert table.count("\n") == 2 + 6 - 1
    assert "decode.shortlist=2000" in table and "decode.shortlist=5000" in table
    assert "decode.jit_step=true" in table
    assert "(../../research/records/2026-01-02-b.md)" in table


def test_write_then_check(repo, capsys):
    assert rr.main(["--root", str(repo), "--check"]) == 1
    assert "README.md" in capsys.readouterr().out
    assert rr.main(["--root", str(repo)]) == 0
    readme = (repo / "README.md").read_text()
    assert "hand-written" not in readme and "| pgn |" in readme
    assert readme.endswith("<!-- speed:end -->\n") and "\ntext\n" in readme
    page = (repo / "docs/results/index.md").read_text()
    assert "(../../research/records/2026-01-01-a.md)" in page and "prose after" in page
    assert rr.main(["--root", str(repo), "--check"]) == 0
    # a table edited by hand is caught
    (repo / "README.md").write_text(readme.replace("47.00", "49.00"))
    assert rr.stale(repo) == [Path("README.md")]


def test_performance_page_rendered_only_where_it_has_the_markers(repo):
    perf = repo / "docs/performance.md"
    perf.write_text("# Performance\n\nno table here\n")
    rr.main(["--root", str(repo)])
    assert perf.read_text() == "# Performance\n\nno table here\n"
    perf.write_text(PAGE.format("speed"))
    rr.main(["--root", str(repo)])
    assert "| AVX2 only |" in perf.read_text()
    assert "(../research/records/2026-01-02-b.md)" in perf.read_text()


def test_readme_without_markers_is_refused_and_nothing_is_written(repo, capsys):
    (repo / "README.md").write_text("# P\n\n## Results\n\nno markers\n")
    before = (repo / "docs/results/index.md").read_text()
    assert rr.main(["--root", str(repo)]) == 2
    err = capsys.readouterr().err
    assert "README.md" in err and "<!-- results:begin -->" in err
    assert (repo / "README.md").read_text() == "# P\n\n## Results\n\nno markers\n"
    assert (repo / "docs/results/index.md").read_text() == before
    with pytest.raises(rr.MarkerError):
        rr.render(repo)
