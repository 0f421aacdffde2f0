"""The preprocessing pipeline's readers: one Beam transform (`Read`) per input format, each
yielding Examples and the `Count`s of what it could not read (malformed records are counted,
never fatal; a damaged gzip keeps the lines before the damage), and the input's fingerprint
(`data_fingerprint`) by which the flow (pgn_tf.pipelines.run) tells changed data."""

from __future__ import annotations

import gzip
import hashlib

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pgn_tf.data.articles import parse_example
from pgn_tf.data.example import Example, ReadStats
from pgn_tf.pipelines.portable import Count, MatchParts, counts_of


def _parse_jsonl_line(raw: bytes):
    stats = ReadStats()
    # Without an id in the record, the article's hash is a stable one on any runner.
    ex = parse_example(raw, "sha1:" + hashlib.sha1(raw).hexdigest()[:16], stats)
    if ex is not None:
        yield ex
    yield from counts_of(stats)


def _parse_jsonl_file(readable):
    """A whole (gzipped) JSONL file: jsonl.lines notices a truncated or corrupt gzip, which
    Beam's text source reads to the cut without a word. Ids as _parse_jsonl_line gives them."""
    from pgn_tf.data import jsonl

    stats = ReadStats()
    with readable.open(compression_type=CompressionTypes.UNCOMPRESSED) as raw:
        f = gzip.GzipFile(fileobj=raw) if readable.metadata.path.endswith(".gz") else raw
        for _, line in jsonl.lines(f, readable.metadata.path, stats):
            line = line.rstrip(b"\r\n")  # as the text source strips it
            ex = parse_example(line, "sha1:" + hashlib.sha1(line).hexdigest()[:16], stats)
            if ex is not None:
                yield ex
    yield from counts_of(stats)


def _parse_story(readable) -> list[Example | Count]:
    from pgn_tf.data import stories

    stats = ReadStats()
    ex = stories.story_example(readable.read(), readable.metadata.path, stats)
    return ([ex] if ex is not None else []) + counts_of(stats)


def _parse_see_bin(readable):
    from pgn_tf.data import see_bin

    stats = ReadStats()
    with readable.open() as f:
        yield from see_bin.read_see_bin_file(f, readable.metadata.path, stats)
    yield from counts_of(stats)


def _read_tfds(spec: str):
    from pgn_tf.data import tfds_reader

    data_dir, _, split = spec.partition(":")
    stats = ReadStats()
    yield from tfds_reader.read_tfds(data_dir, split or "train", stats=stats)
    yield from counts_of(stats)


def _read_parallel(spec: str):
    from pgn_tf.data import parallel

    stats = ReadStats()
    yield from parallel.read_parallel(spec, stats)
    yield from counts_of(stats)


def file_patterns(input_path: str, fmt: str) -> list[str]:
    """The file patterns an --input of a format reads (Beam FileSystems syntax)."""
    if fmt == "story" and not any(c in input_path for c in "*?[") and not input_path.endswith(
        ".story"
    ):
        return [input_path.rstrip("/") + "/*.story"]  # a directory of stories
    if fmt == "tfds":
        return [FileSystems.join(input_path.split(":")[0], "**")]  # the prepared dataset's files
    if fmt == "parallel":
        from pgn_tf.data import parallel

        return list(parallel.split_spec(input_path))
    return [input_path]


def data_fingerprint(input_path: str, fmt: str) -> dict:
    """What the input data is, without reading it: every matched file's path, size and
    modification time (as make and rsync judge change), hashed. A file added, removed, replaced
    or rewritten changes the digest, so a pipeline step reading it runs again."""
    digest = hashlib.sha1()
    files = total = 0
    for result in FileSystems.match(file_patterns(input_path, fmt)):
        for m in sorted(result.metadata_list, key=lambda m: m.path):
            digest.update(f"{m.path}\0{m.size_in_bytes}\0{m.last_updated_in_seconds}\n".encode())
            files += 1
            total += m.size_in_bytes
    return {"files": files, "bytes": total, "sha1": digest.hexdigest()}


class Read(beam.PTransform):
    """PBegin -> PCollection[Example | Count] for one input format.

    input_path: a file, glob or (story) directory; for tfds, `DATA_DIR[:split]`.
    parts: how many parts the files are matched in (MatchParts).
    """

    def __init__(self, input_path: str, fmt: str, parts: int = 1):
        super().__init__()
        self.input_path = input_path
        self.fmt = fmt
        self.parts = parts

    def expand(self, pbegin):
        if self.fmt in ("tfds", "parallel"):  # one reader: the files must stay in step
            read = _read_tfds if self.fmt == "tfds" else _read_parallel
            return pbegin | beam.Create([self.input_path]) | beam.FlatMap(read)
        paths = pbegin | MatchParts(file_patterns(self.input_path, self.fmt), self.parts)
        if self.fmt == "jsonl":
            # Uncompressed files through the text source, which splits a large file across
            # workers; gzipped ones (never split) whole, so a damaged one is noticed and named.
            gz = paths | "Gz" >> beam.Filter(lambda path: path.endswith(".gz"))
            plain = paths | "Plain" >> beam.Filter(lambda path: not path.endswith(".gz"))
            from_gz = gz | fileio.ReadMatches() | "ParseGz" >> beam.FlatMap(_parse_jsonl_file)
            from_text = (
                plain
                | beam.io.ReadAllFromText(coder=beam.coders.BytesCoder())
                | "ParseLines" >> beam.FlatMap(_parse_jsonl_line)
            )
            return (from_gz, from_text) | "AllJsonl" >> beam.Flatten()
        parse = _parse_story if self.fmt == "story" else _parse_see_bin
        return paths | fileio.ReadMatches() | beam.FlatMap(parse)
