"""The one article reader (pgn_tf.data.articles): formats told apart once, and a JSON line's
bad-line rules shared by the corpus form (counted) and the summarize form (reported)."""

import gzip
import io

import pytest

from pgn_tf.data import articles
from pgn_tf.data.example import Example, ReadStats


def test_the_format_views_are_cut_from_one_list():
    assert set(articles.EXAMPLE_FORMATS) | {"text"} == set(articles.FORMATS)
    assert set(articles.PIPELINE_FORMATS) == set(articles.EXAMPLE_FORMATS) - {"tfrecord"}
    assert set(articles.ARTICLE_FORMATS) <= set(articles.FORMATS)


@pytest.mark.parametrize("path, want", [("tfds:/d:train", "tfds"), ("a.JSONL.gz", "jsonl"),
                                        ("a.json", "jsonl"), ("x.bin", "see_bin"),
                                        ("x-*.tfrecord", "tfrecord")])
def test_a_corpus_path_is_told_by_its_name(path, want):
    assert articles.detect_format(path) == want


def test_a_directory_is_a_corpus_of_stories(tmp_path):
    assert articles.detect_format(str(tmp_path)) == "story"


@pytest.mark.parametrize("path, first, want", [("a.jsonl", b"plain", "jsonl"),
                                               ("a.txt", b'  {"article": "x"}', "jsonl"),
                                               ("a.txt", b"plain", "text"),
                                               ("-", None, "text"),
                                               ("-", b"{", "jsonl")])
def test_a_file_to_summarize_is_told_by_name_then_first_line(path, first, want):
    assert articles.detect_format(path, first, articles=True) == want


BAD = [(b"{not json", "malformed json", "not JSON ("),
       (b"[" * 100_000, "json nested too deep", "not JSON (nested too deeply)"),
       (b"[1, 2]", "not a json object", "not a JSON object (a list)"),
       (b'{"summary": "s"}', "missing article or summary", "no 'article' field"),
       (b'{"article": 3, "summary": "s"}', "missing article or summary",
        "a int as its 'article' field, not text")]


@pytest.mark.parametrize("raw, reason, message", BAD)
def test_one_bad_line_is_counted_by_a_corpus_and_reported_by_summarize(raw, reason, message):
    stats = ReadStats()
    assert articles.parse_example(raw, "id", stats) is None
    assert (stats.read, stats.dropped) == (1, {reason: 1})
    with pytest.raises(articles.BadLine) as bad:
        articles.parse_line(raw, "jsonl")
    assert str(bad.value).startswith(message)


def test_good_and_blank_lines_in_both_forms():
    stats = ReadStats()
    raw = b'{"article": "a b", "summary": "c", "extra": 1}'
    assert articles.parse_example(raw, "f:1", stats) == Example("a b", "c", "f:1")
    assert articles.parse_line(raw, "jsonl")["extra"] == 1
    assert articles.parse_example(b"  \n", "f:2", stats) is None and stats.read == 1
    assert articles.parse_line(b"", "jsonl") is None
    with pytest.raises(articles.BadLine, match="empty line"):
        articles.parse_line(b" ", "text")
    with pytest.raises(articles.BadLine, match="not UTF-8"):
        articles.parse_line(b"\xff", "text")


def test_raw_lines_end_at_a_damaged_gzip():
    data = gzip.compress(b"one\r\ntwo\nthree\n")[:-12]  # the trailer and some data cut off
    got = list(articles.raw_lines(gzip.GzipFile(fileobj=io.BytesIO(data))))
    assert got[-1][1] is None and all(line for _, line in got[:-1])
