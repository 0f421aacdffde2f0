"""Each reader on a fixture written byte for byte in its real format."""

import gzip
import json
import struct

import pytest
import tensorflow as tf

from pgn_tf.data import dataset, jsonl, parallel, see_bin, stories, tfrecord
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


def gzip_lines(rows):
    return gzip.compress(("\n".join(json.dumps(r) for r in rows) + "\n").encode())


ROWS = [{"id": str(i), "article": f"article {i} " * 30, "summary": f"summary {i}"}
        for i in range(400)]


def test_truncated_or_corrupt_gzip_keeps_the_lines_before_and_names_file_and_line(tmp_path):
    data = gzip_lines(ROWS)
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(data[: len(data) // 2])
    stats = ReadStats()
    got = list(jsonl.read_jsonl(str(cut), stats))
    assert 0 < len(got) < len(ROWS) and [e.id for e in got] == [str(i) for i in range(len(got))]
    assert stats.dropped == {f"truncated gzip: {cut} unreadable after line {len(got)}": 1}
    assert stats.read == len(got) + 1 and stats.kept == len(got)

    crc = bytearray(data)
    crc[-8] ^= 0xFF  # the CRC32 in the gzip trailer: every line decodes, the check fails at the end
    bad = tmp_path / "crc.jsonl.gz"
    bad.write_bytes(bytes(crc))
    stats = ReadStats()
    assert len(list(jsonl.read_jsonl(str(bad), stats))) == len(ROWS)
    assert stats.dropped == {f"corrupt gzip: {bad} unreadable after line {len(ROWS)}": 1}

    # The parallel reader too: the pairs before the cut are kept, the rest counted.
    src, tgt = tmp_path / "x.article.txt.gz", tmp_path / "x.title.txt.gz"
    src.write_bytes(gzip.compress("".join(f"a {i}\n" for i in range(50)).encode())[:-12])
    tgt.write_bytes(gzip.compress("".join(f"t {i}\n" for i in range(50)).encode()))
    stats = ReadStats()
    pairs = list(parallel.read_parallel(str(src), stats))
    assert pairs[-1].article == f"a {len(pairs) - 1}" and pairs[-1].summary == f"t {len(pairs) - 1}"
    assert stats.dropped[f"truncated gzip: {src} unreadable after line {len(pairs)}"] == 1
    assert stats.dropped["no matching line in the other file"] == 50 - len(pairs)

    # Training on it converts the good part and says what was lost.
    files = dataset.resolve_files(str(cut), str(tmp_path / "cache"))
    assert tfrecord.validate_tfrecords(files) == len(got)


def test_deep_nesting_and_huge_integers_are_dropped_lines(tmp_path):
    path = tmp_path / "hostile.jsonl"
    good = json.dumps({"article": "a b", "summary": "a"})
    path.write_text("\n".join([
        good,
        "[" * 200_000,  # past the parser's recursion limit
        '{"article": "a", "summary": "b", "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
        '{"article": "a", "summary": "b", "id": ' + "9" * 10_000 + "}",  # past int digit limit
        '{"article": "a", "summary": "b", "n": -' + "1" * 5_000 + "}",
        good,
    ]) + "\n")
    stats = ReadStats()
    assert len(list(jsonl.read_jsonl(str(path), stats))) == 2
    assert stats.dropped == {"json nested too deep": 2, "json number too long": 2}


def record_offsets(path):
    """Byte offset of each record, from the TFRecord framing (length, CRC, data, CRC)."""
    raw, offsets, pos = open(path, "rb").read(), [], 0
    while pos < len(raw):
        offsets.append(pos)
        (n,) = struct.unpack("<Q", raw[pos : pos + 8])
        pos += n + 16
    return offsets


def test_a_corrupt_record_mid_file_is_named_by_file_and_offset_when_read(tmp_path, vocab, tiny_cfg):
    exs = [Example(f"article {i} words", f"summary {i}", str(i)) for i in range(40)]
    (good,) = tfrecord.write_tfrecords(exs, str(tmp_path / "good"))
    offsets = record_offsets(good)
    raw = bytearray(open(good, "rb").read())
    raw[offsets[25] + 20] ^= 0x55  # inside record 25's data: its CRC no longer matches
    bad = tmp_path / "bad.tfrecord"
    bad.write_bytes(bytes(raw))
    want = (f"data file {bad} has a corrupt or truncated record at byte offset {offsets[25]} "
            f"of a {len(raw)}-byte file")

    # Start-up looks at the first record only: the file is accepted, and checked as it is read.
    assert dataset.resolve_files(str(bad), str(tmp_path / "cache")) == [str(bad)]
    for training in (False, True):
        ds = dataset.make_dataset([good, str(bad)], vocab, tiny_cfg.data, 4, True, training,
                                  seed=0)
        with pytest.raises(tf.errors.InvalidArgumentError) as e:
            for _ in ds.take(200):
                pass
        assert tfrecord.read_error(e.value) == want
    with pytest.raises(ValueError, match=want):
        list(tfrecord.read_tfrecords(str(bad)))
    with pytest.raises(ValueError, match=want):
        tfrecord.validate_tfrecords([str(bad)])
    assert tfrecord.read_error(RuntimeError("something else")) is None


def test_a_cut_file_fails_at_start_up_from_its_record_headers(tmp_path):
    """Truncation (the usual damage: a copy or download cut short) needs no data read: the
    record headers stop tiling the file. Caught before training writes anything."""
    exs = [Example(f"article {i} words", f"summary {i}", str(i)) for i in range(40)]
    (good,) = tfrecord.write_tfrecords(exs, str(tmp_path / "good"))
    offsets = record_offsets(good)
    raw = open(good, "rb").read()
    assert tfrecord.framing_error(good) is None and tfrecord.check_tfrecords([good]) == 1
    for name, data, at, what in [
        ("cut_in_data.tfrecord", raw[: offsets[30] + 20], offsets[30], "truncated record"),
        ("cut_in_header.tfrecord", raw[: offsets[30] + 5], offsets[30], "truncated record"),
        ("bad_length.tfrecord", raw[:offsets[7]] + b"\xff" + raw[offsets[7] + 1:], offsets[7],
         "corrupt record length"),
    ]:
        path = tmp_path / name
        path.write_bytes(data)
        want = (f"data file {path} is not a readable TFRecord of pgn_tf examples: {what} at "
                f"byte offset {at} of a {len(data)}-byte file")
        with pytest.raises(ValueError) as e:
            dataset.resolve_files(str(path), str(tmp_path / "cache"))
        assert str(e.value) == want
    empty = tmp_path / "empty.tfrecord"
    empty.write_bytes(b"")
    assert tfrecord.check_tfrecords([str(empty)]) == 0


def test_training_on_data_without_a_usable_summary_is_an_error_not_a_hang(tmp_path, vocab,
                                                                          tiny_cfg):
    files = tfrecord.write_tfrecords(
        [Example(f"article {i}", "" if i % 2 else "  \n ") for i in range(30)],
        str(tmp_path / "e"), 2)
    with pytest.raises(ValueError, match=r"training data \(2 file\(s\), first .*e-00000-of-00002"
                                         r".tfrecord\) holds no example whose article and summary"):
        dataset.make_dataset(files, vocab, tiny_cfg.data, 4, True, training=True, seed=0)
    # One usable example anywhere is enough (the probe stops at it).
    files = tfrecord.write_tfrecords([Example("a", "")] * 30 + [Example("a b", "a")],
                                     str(tmp_path / "f"))
    ds = dataset.make_dataset(files, vocab, tiny_cfg.data, 4, True, training=True, seed=0)
    assert next(iter(ds))["dec_len"].shape == (4,)
