"""Each reader on a fixture written byte for byte in its real format."""

import gzip
import json
import struct

import pytest
import tensorflow as tf

from pgn_tf.data import dataset, jsonl, see_bin, stories, tfrecord
from pgn_tf.data.example import Example, ReadStats


def test_jsonl_gz_counts_malformed_lines(tmp_path):
    path = tmp_path / "c.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write(json.dumps({"id": "1", "article": "a b", "summary": "s"}) + "\n")
        f.write("{not json\n")
        f.write(json.dumps(["a list"]) + "\n")
        f.write(json.dumps({"article": "only article"}) + "\n")
        f.write("\n")
        f.write(json.dumps({"article": "c d", "summary": "t"}) + "\n")
    stats = ReadStats()
    got = list(jsonl.read_jsonl(str(path), stats))
    assert [e.article for e in got] == ["a b", "c d"]
    assert stats.read == 5 and stats.kept == 2
    assert stats.dropped == {"malformed json": 1, "not a json object": 1,
                             "missing article or summary": 1}


STORY = """LONDON (CNN) -- The cat sat on the mat

It was a sunny day.

@highlight

Cat sits on mat

@highlight

Day was sunny
"""


def test_story_dir(tmp_path):
    (tmp_path / "abc.story").write_text(STORY)
    (tmp_path / "nohl.story").write_text("Just an article with no highlights.\n")
    stats = ReadStats()
    got = list(stories.read_stories(str(tmp_path), stats))
    assert len(got) == 1 and got[0].id == "abc"
    assert got[0].article == "LONDON (CNN) -- The cat sat on the mat . It was a sunny day."
    assert got[0].summary == "Cat sits on mat .\nDay was sunny ."
    assert stats.dropped == {"no @highlight": 1}


def test_see_bin_format_and_truncation(tmp_path):
    path = tmp_path / "train_000.bin"
    exs = [Example("the article one .", "first sent .\nsecond sent ."), Example("two .", "s .")]
    see_bin.write_see_bin(exs, str(path))
    raw = path.read_bytes()
    (n,) = struct.unpack("q", raw[:8])
    first = tf.train.Example.FromString(raw[8 : 8 + n])
    assert first.features.feature["abstract"].bytes_list.value[0] == (
        b"<s> first sent . </s> <s> second sent . </s>")
    got = list(see_bin.read_see_bin(str(path)))
    assert [(e.article, e.summary) for e in got] == [(e.article, e.summary) for e in exs]
    trunc = tmp_path / "trunc.bin"
    trunc.write_bytes(raw[:-5])
    stats = ReadStats()
    assert len(list(see_bin.read_see_bin(str(trunc), stats))) == 1
    assert stats.dropped == {"truncated record": 1}


def test_tfrecord_round_trip_and_corrupt_file(tmp_path):
    exs = [Example(f"article {i}", f"summary {i}", str(i)) for i in range(5)]
    files = tfrecord.write_tfrecords(exs, str(tmp_path / "part"), 2)
    assert len(files) == 2 and tfrecord.validate_tfrecords(files) == 5
    back = sorted(tfrecord.read_tfrecords(str(tmp_path / "part-*")), key=lambda e: e.id)
    assert back == exs
    bad = tmp_path / "bad.tfrecord"
    data = open(files[0], "rb").read()
    bad.write_bytes(data[:-3])
    with pytest.raises(ValueError, match="bad.tfrecord is not a readable TFRecord"):
        tfrecord.validate_tfrecords([str(bad)])
    junk = tmp_path / "junk.tfrecord"
    junk.write_bytes(b"this is not a tfrecord at all")
    with pytest.raises(ValueError, match="junk.tfrecord"):
        dataset.resolve_files(str(junk), str(tmp_path / "cache"))


def test_resolve_files_converts_once_and_rejects_missing(tmp_path):
    src = tmp_path / "c.jsonl"
    jsonl.write_jsonl([Example("a b c", "a", "1"), Example("d e", "e", "2")], str(src))
    files = dataset.resolve_files(str(src), str(tmp_path / "cache"))
    assert tfrecord.validate_tfrecords(files) == 2
    assert dataset.resolve_files(str(src), str(tmp_path / "cache")) == files
    with pytest.raises(ValueError, match="does not exist"):
        dataset.resolve_files(str(tmp_path / "missing.jsonl"), str(tmp_path / "cache"))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match="no usable examples"):
        dataset.resolve_files(str(empty), str(tmp_path / "cache"))
