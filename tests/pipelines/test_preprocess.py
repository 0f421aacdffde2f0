"""The Beam preprocessing pipeline on the DirectRunner, on fixtures in the real formats."""

import gzip
import hashlib
import json
import os

import pytest
import tensorflow as tf

from pgn_tf import config
from pgn_tf.data import dataset, see_bin, tfrecord
from pgn_tf.data.example import Example
from pgn_tf.pipelines import portable, preprocess


def run(tmp_path, *argv):
    """`python -m pgn_tf.pipelines.preprocess ARGV` in this process: the stats.json it wrote."""
    assert preprocess.main(list(argv)) == 0
    out = argv[argv.index("--output_dir") + 1]
    with open(os.path.join(out, "stats.json")) as f:
        return json.load(f)


def records(pattern):
    return list(tfrecord.read_tfrecords(pattern))


def write_jsonl(path, rows):
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for r in rows:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")


def test_jsonl_counts_add_up_and_output_trains(tmp_path):
    rows = [{"id": f"d{i}", "article": f"the package number {i} does thing {i % 7} well .",
             "summary": f"thing {i % 7} tool"} for i in range(60)]
    rows += [
        "{broken json",
        {"id": "dup", "article": "The package number 3 does thing 3 well.", "summary": "other"},
        {"id": "empty-article", "article": " ... ", "summary": "x"},
        {"id": "empty-summary", "article": "a real article .", "summary": "   "},
        {"id": "no-summary", "article": "only an article"},
    ]
    src = tmp_path / "corpus.jsonl.gz"
    write_jsonl(src, rows)
    out = tmp_path / "out"
    stats = run(tmp_path, "--input", str(src), "--format", "jsonl", "--output_dir", str(out),
                "--vocab_size", "30", "--split", "train=0.8,validation=0.2")

    assert stats["read"] == 65
    assert stats["dropped"] == {"malformed json": 1, "missing article or summary": 1,
                                "empty summary": 1}  # " ... " tokenizes to "...", not empty
    assert stats["duplicates"] == 1
    assert sum(stats["kept"].values()) == 61 == stats["read"] - 3 - 1
    train = records(str(out / "train-*.tfrecord"))
    valid = records(str(out / "validation-*.tfrecord"))
    assert len(train) == stats["kept"]["train"] and len(valid) == stats["kept"]["validation"]
    assert len(train) > len(valid) > 0
    ids = [e.id for e in train + valid]
    assert "dup" not in ids and "d3" in ids and len(set(ids)) == len(ids)  # lowest id kept
    # The split follows the id's hash only: the same id always lands in the same split.
    for e in valid:
        assert portable.hash_fraction(e.id) >= 0.8
    assert json.loads((out / "stats.json").read_text())["read"] == 65

    # The vocab equals the one pgn_tf.train would build from the same training records.
    cfg = config.preset("tiny").data
    cfg.vocab_size = 30
    want = dataset.build_vocab(sorted(tf.io.gfile.glob(str(out / "train-*.tfrecord"))), cfg)
    got = (out / "vocab.txt").read_text().splitlines()
    assert got == [f"{w} {c}" for w, c in zip(want.words[4:], want.counts[4:])]

    # What it wrote is what the trainer reads.
    files = dataset.resolve_files(str(out / "train-*.tfrecord"), str(tmp_path / "cache"))
    batch = next(iter(dataset.make_dataset(files, want, cfg, 4, True, training=False)))
    by_id = {e.id: e for e in train}
    for i, art, n in zip(batch["id"].numpy(), batch["article"].numpy(), batch["enc_len"].numpy()):
        assert art.decode() == by_id[i.decode()].article  # the record as written, id and text
        assert n == len(by_id[i.decode()].article.split())  # plain space-separated words here


def test_the_direct_runner_runs_in_process_and_never_tries_prism(tmp_path, prism_attempts):
    """Beam's own DirectRunner (2.77) first tries its Prism runner, which downloads a binary
    from GitHub at run time; --runner DirectRunner here is the in-process runner alone."""
    assert (portable.pipeline_options("DirectRunner", [], "preprocess").get_all_options()
            ["runner"] == portable.IN_PROCESS_RUNNER)
    src = tmp_path / "c.jsonl.gz"
    write_jsonl(src, [{"id": f"d{i}", "article": f"a b {i} .", "summary": "a"} for i in range(5)])
    stats = run(tmp_path, "--input", str(src), "--format", "jsonl", "--output_dir",
                str(tmp_path / "out"), "--vocab_size", "10")
    assert stats["read"] == 5 and prism_attempts == []


def test_story_dir_with_url_lists(tmp_path):
    stories = tmp_path / "stories"
    stories.mkdir()
    urls = {"train": [], "val": [], "test": []}
    for i in range(9):
        url = f"http://www.cnn.com/2015/story-{i}.html"
        split = ("train", "val", "test")[i % 3]
        urls[split].append(url)
        sha = hashlib.sha1(url.encode()).hexdigest()
        body = f"Article {i} text here.\n\n@highlight\n\nHighlight {i} one\n\n@highlight\n\nTwo {i}\n"
        (stories / f"{sha}.story").write_text(body)
    (stories / "nohighlight.story").write_text("Just an article, no highlights.\n")
    (stories / "bad-bytes.story").write_bytes(b"Caf\xe9 \xff article.\n\n@highlight\n\nok\n")
    lists = tmp_path / "url_lists"
    lists.mkdir()
    for split, fname in (("train", "all_train.txt"), ("val", "all_val.txt"),
                         ("test", "all_test.txt")):
        (lists / fname).write_text("\n".join(urls[split]) + "\n")
    out = tmp_path / "out"
    stats = run(tmp_path, "--input", str(stories), "--format", "story", "--output_dir", str(out),
                "--split_files", str(lists), "--vocab_size", "100")
    assert stats["read"] == 11
    assert stats["kept"] == {"train": 3, "validation": 3, "test": 3}
    assert stats["dropped"] == {"no @highlight": 1, "not in any split": 1}
    train = sorted(records(str(out / "train-*.tfrecord")), key=lambda e: e.id)
    want = sorted(hashlib.sha1(u.encode()).hexdigest() for u in urls["train"])
    assert [e.id for e in train] == want
    assert train[0].summary.count("\n") == 1  # two highlights, one per line


def test_see_bin_truncated_record_is_counted(tmp_path):
    path = tmp_path / "train_000.bin"
    exs = [Example(f"article {i} words here .", f"summary {i} .\nsecond {i} .") for i in range(5)]
    see_bin.write_see_bin(exs, str(path))
    data = path.read_bytes()
    path.write_bytes(data[:-7])  # the last record is cut short
    out = tmp_path / "out"
    stats = run(tmp_path, "--input", str(tmp_path / "*.bin"), "--format", "see_bin",
                "--output_dir", str(out), "--vocab_size", "50", "--split", "train=1")
    assert stats["read"] == 5 and stats["dropped"] == {"truncated record": 1}
    assert stats["kept"] == {"train": 4}
    assert sorted(e.summary for e in records(str(out / "train-*.tfrecord")))[0] == (
        "summary 0 .\nsecond 0 .")


@pytest.mark.parametrize("argv, message", [
    (["--input", "{missing}/none-*.jsonl", "--format", "jsonl"], "matches no file"),
    (["--split", "train=0.5,validation=0.2"], "sum to 0.7"),
    (["--split", "validation=1"], "needs a 'train' part"),
    (["--vocab_size", "3"], "--vocab_size"),
])
def test_bad_arguments_are_one_line_errors(tmp_path, capsys, argv, message):
    src = tmp_path / "c.jsonl.gz"
    write_jsonl(src, [{"article": "a b c", "summary": "a"}])
    base = {"--input": str(src), "--format": "jsonl", "--output_dir": str(tmp_path / "o")}
    argv = [a.replace("{missing}", str(tmp_path)) for a in argv]
    for k in list(base):
        if k in argv:
            base.pop(k)
    flat = [x for kv in base.items() for x in kv] + argv
    assert preprocess.main(flat) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert err[0].startswith("pgn_tf.pipelines.preprocess: error")
    assert not os.path.exists(tmp_path / "o" / "stats.json")


def test_a_truncated_gzip_keeps_its_good_lines_and_is_named_in_the_counts(tmp_path):
    """Beam's text source would read a cut gzip to the cut without a word; the whole-file reader
    counts the damage, naming the file and the last whole line. Plain files beside it are read
    by the (splittable) text source, with the same ids as before."""
    rows = [json.dumps({"id": f"g{i}", "article": f"gz article {i} " * 40, "summary": f"gz {i}"})
            for i in range(300)]
    data = gzip.compress(("\n".join(rows) + "\n").encode())
    cut = tmp_path / "in" / "a.jsonl.gz"
    cut.parent.mkdir()
    cut.write_bytes(data[: len(data) // 2])
    (tmp_path / "in" / "b.jsonl").write_text("".join(
        json.dumps({"id": f"p{i}", "article": f"plain article {i}", "summary": f"plain {i}"}) + "\n"
        for i in range(20)))
    out = tmp_path / "out"
    stats = run(tmp_path, "--input", str(tmp_path / "in" / "*.jsonl*"), "--format", "jsonl",
                "--output_dir", str(out), "--vocab_size", "50", "--split", "train=1")
    ((reason, n),) = stats["dropped"].items()
    assert n == 1 and reason.startswith(f"truncated gzip: {cut} unreadable after line ")
    whole = int(reason.rsplit(" ", 1)[1])
    assert 0 < whole < 300 and stats["kept"] == {"train": 20 + whole}
    assert stats["read"] == 20 + whole + 1 == stats["accounted"]
    ids = {e.id for e in records(str(out / "train-*.tfrecord"))}
    assert ids == {f"p{i}" for i in range(20)} | {f"g{i}" for i in range(whole)}
