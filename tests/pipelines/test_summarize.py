"""The Beam summarization job: RunInference over the exported SavedModel on the DirectRunner."""

import glob
import gzip
import json

import pytest

from pgn_tf.data import tfrecord
from pgn_tf.inference.saved_model import SavedModelSummarizer
from pgn_tf.pipelines import summarize, summarizing


@pytest.mark.slow
def test_runinference_job_summarizes_a_glob_and_lists_bad_lines(exported, corpus, tmp_path,
                                                                capsys, prism_attempts):
    _, _, path = exported
    articles = [e.article for e in tfrecord.read_tfrecords(corpus["validation"])][:14]
    with gzip.open(tmp_path / "part-1.jsonl.gz", "wt", encoding="utf-8") as f:
        for i, a in enumerate(articles[:8]):
            f.write(json.dumps({"id": f"p1-{i}", "article": a, "extra": [i]}) + "\n")
    with open(tmp_path / "part-2.jsonl", "wb") as f:
        for i, a in enumerate(articles[8:12]):
            f.write(json.dumps({"id": f"p2-{i}", "article": a}).encode() + b"\n")
            if i == 1:
                f.write(b'{"id": "oops", "body": "no article here"}\n')  # line 3
    (tmp_path / "notes.txt").write_text(articles[12] + "\n" + articles[13] + "\n")

    out = str(tmp_path / "out" / "summaries")
    stats = summarizing.summarize_files(path, str(tmp_path / "part-*"), out, batch_size=4,
                                        beam_args=["--direct_num_workers", "1"])
    assert stats["records"] == 12 and stats["summaries"] == 12 and stats["bad lines"] == 1
    assert stats["lines"] == 13 and prism_attempts == []  # the in-process runner ran it
    rows = {}
    for shard in glob.glob(out + "-*-of-*.jsonl"):
        for line in open(shard, encoding="utf-8"):
            row = json.loads(line)
            rows[row["id"]] = row
    assert len(rows) == 12 and rows["p1-3"]["extra"] == [3]  # fields copied through
    want = SavedModelSummarizer(path)(articles[:12])
    ids = [f"p1-{i}" for i in range(8)] + [f"p2-{i}" for i in range(4)]
    assert [rows[i]["summary"] for i in ids] == want
    errors = open(glob.glob(out + "-errors-*.txt")[0]).read().splitlines()
    assert errors == [f"{tmp_path / 'part-2.jsonl'}:3: no 'article' field"]

    # Plain text: a line is an article; rows say where each came from.
    assert summarizing.summarize_files(path, str(tmp_path / "notes.txt"),
                                       out + "t")["summaries"] == 2
    rows = [json.loads(x) for s in glob.glob(out + "t-*.jsonl") for x in open(s)]
    by_line = {r["line"]: r for r in rows}
    assert by_line[2]["summary"] == SavedModelSummarizer(path)(articles[13])
    assert by_line[1]["file"].endswith("notes.txt")

    assert summarize.main(["--saved_model", path, "--input", str(tmp_path / "none*"),
                           "--output", out]) == 2
    assert "matches no file" in capsys.readouterr().err
    assert summarize.main(["--saved_model", str(tmp_path), "--input", str(tmp_path / "part-*"),
                           "--output", out]) == 2
    assert "is it a pgn_tf export" in capsys.readouterr().err
