"""Batch summarization: `python -m pgn_tf.summarize --input ... --output ...` against the
compiled Summarizer and against what evaluate decodes for the same articles."""

import json
import random

import pytest
import tensorflow as tf

from pgn_tf import summarize, text
from pgn_tf.data import synthetic
from pgn_tf.inference import corpus, evaluator
from pgn_tf.inference.summarizer import Summarizer

BAD_LINES = {  # 1-based line number in the file -> the line and what the report must say
    18: (b"{not json at all", "not JSON"),
    252: (json.dumps({"id": "no-article", "text": "an article under the wrong key ."}).encode(),
          "no 'article' field"),
    404: (b'{"id": "latin-1", "article": "caf\xe9 au lait .", "summary": "caf\xe9 ."}',
          "not UTF-8"),
}


def _articles(n: int, seed: int) -> list[dict]:
    """Synthetic records of varied length: each article keeps its event sentence and a random
    half of the others (1 to 9 sentences)."""
    rng = random.Random(seed)
    out = []
    for i, ex in enumerate(synthetic.generate(n, seed=seed)):
        sentences = [s.strip() + " ." for s in ex.article.split(" .") if s.strip()]
        kept = [s for s in sentences if ", a " in s or rng.random() < 0.5]
        out.append({"id": f"a{i}", "article": " ".join(kept), "summary": ex.summary,
                    "meta": {"sentences": len(kept)}})
    return out


@pytest.fixture(scope="module")
def jsonl_500(tmp_path_factory):
    """500 lines: 497 records (article, summary, id, meta) and the 3 BAD_LINES."""
    records = _articles(497, seed=11)
    path = tmp_path_factory.mktemp("batch") / "articles.jsonl"
    it = iter(records)
    with open(path, "wb") as f:
        for lineno in range(1, 501):
            line = BAD_LINES[lineno][0] if lineno in BAD_LINES else json.dumps(next(it)).encode()
            f.write(line + b"\n")
    return str(path), records


@pytest.mark.slow  # decodes 500 articles three times (CLI, Summarizer, evaluate)
def test_cli_summarizer_and_evaluate_agree_on_500_lines(trained_model_dir, jsonl_500, tmp_path,
                                                        capsys):
    path, records = jsonl_500
    out = tmp_path / "out.jsonl"
    rc = summarize.main(["--model_dir", trained_model_dir, "--input", path, "--output", str(out),
                         "--output_field", "generated", "--progress", "off"])
    err = capsys.readouterr().err
    assert rc == 0, err
    for lineno, (_, reason) in BAD_LINES.items():  # each bad line reported with its number
        assert f"line {lineno}: {reason}" in err
    assert "497 records in 500 lines: 497 summarized" in err and "3 bad line(s)" in err
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == [r["id"] for r in records]  # input order
    assert all(r["meta"] == rec["meta"] and r["summary"] == rec["summary"]  # copied through
               for r, rec in zip(rows, records))
    cli = [r["generated"] for r in rows]

    api = Summarizer.from_model_dir(trained_model_dir)(
        [r["article"] for r in records])
    assert api == cli

    evaluator.evaluate(evaluator.ModelDirSource(trained_model_dir), path,
                       output_dir=str(tmp_path / "ev"), bootstrap=0, progress=False)
    decoded = {}
    for line in open(tmp_path / "ev" / "decoded.jsonl"):
        d = json.loads(line)
        decoded[d["id"]] = d["decoded"]
    ids = [r["id"] for r in records]
    want = text.detokenize(tf.constant([decoded[i] for i in ids])).numpy()
    assert cli == [w.decode("utf-8") for w in want]
    assert len(set(cli)) > 400  # real, article-specific summaries


@pytest.mark.slow
def test_resume_text_stdin_stop_and_errors(trained_model_dir, jsonl_500, tmp_path, capsys,
                                           monkeypatch):
    path, records = jsonl_500
    src = tmp_path / "articles.txt"
    src.write_text("".join(r["article"] + "\n" for r in records[:40]), encoding="utf-8")
    full = tmp_path / "full.txt"
    assert summarize.main(["--model_dir", trained_model_dir, "--input", str(src),
                           "--output", str(full), "--batch_size", "8"]) == 0
    lines = full.read_text().splitlines()
    assert len(lines) == 40 and all(lines)

    # A killed run: 25 rows, the last cut short. The rerun keeps 24 and writes the rest.
    part = tmp_path / "part.txt"
    part.write_text("\n".join(lines[:25])[:-3], encoding="utf-8")
    capsys.readouterr()
    assert summarize.main(["--model_dir", trained_model_dir, "--input", str(src),
                           "--output", str(part), "--batch_size", "8"]) == 0
    err = capsys.readouterr().err
    assert "removed a last row cut short" in err and "16 summarized, 24 already" in err
    assert part.read_text().splitlines() == lines

    # --on_error stop: the rows before the bad line are written, then one error line.
    bad = tmp_path / "bad.txt"
    bad.write_bytes(src.read_bytes().replace(records[5]["article"].encode(), b"\xff\xfe"))
    stopped = tmp_path / "stopped.txt"
    assert summarize.main(["--model_dir", trained_model_dir, "--input", str(bad),
                           "--output", str(stopped), "--on_error", "stop"]) == 2
    err = capsys.readouterr().err
    assert f"{bad} line 6: not UTF-8 (byte 0); stopped" in err
    assert stopped.read_text().splitlines() == lines[:5]

    # Standard input to standard output, JSONL recognised by its first line.
    monkeypatch.setattr("sys.stdin", _Stdin(b"".join(
        json.dumps({"article": r["article"]}).encode() + b"\n" for r in records[:3])))
    assert summarize.main(["--model_dir", trained_model_dir, "--input", "-",
                           "--output", "-"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [r["summary"] for r in rows] == lines[:3]

    for argv, message in (
            (["--input", str(src), "--output", str(tmp_path / "x.txt")], "one of --model_dir"),
            (["--model_dir", trained_model_dir, "--input", str(tmp_path / "none.txt"),
              "--output", str(tmp_path / "x.txt")], "does not exist"),
            (["--model_dir", trained_model_dir, "--input", str(src)], "needs --output"),
            (["--model_dir", trained_model_dir, "--input", str(src), "--output",
              str(tmp_path / "x.gz")], "must be plain"),
            (["--model_dir", trained_model_dir, "--input", str(src), "--output", str(part),
              "--format", "text", "--batch_size", "8", "x"], "give no TEXT")):
        assert summarize.main(argv) == 2
        assert message in capsys.readouterr().err


class _Stdin:
    def __init__(self, data: bytes):
        import io

        self.buffer = io.BytesIO(data)


def test_progress_bar_shows_articles_per_second(trained_model_dir, tmp_path):
    import io

    src = tmp_path / "a.txt"
    src.write_text("".join(f"article number {i} about a bridge .\n" for i in range(12)))
    stream = io.StringIO()
    corpus.summarize_corpus(Summarizer.from_model_dir(trained_model_dir), str(src),
                            str(tmp_path / "o.txt"), batch_size=4, progress="on",
                            progress_stream=stream)
    shown = stream.getvalue()
    assert "12/12" in shown and "articles/s" in shown
