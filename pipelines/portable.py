"""What every Beam runner runs the same way, shared by the pipelines (preprocess, summarize):
counts that travel as data, batches from hash buckets, a shard writer that a retry rewrites
identically, the input matched in parts, and running on the DirectRunner or Beam's DaskRunner
with one-line errors. Why each exists: pgn_tf.pipelines.preprocess's docstring.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import time
import uuid
from typing import NamedTuple

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineRunner

from pgn_tf.data.example import ReadStats
from pgn_tf.utils.errors import UserError

COUNTS_FILE = "counts.json"
MAX_READ_SHARDS = 16  # parts the input files are matched in (each part one Create element)
SHARD_BYTES = 128 << 20  # --num_shards 0: one output shard per this many input bytes
ITEM_BYTES = 2048  # a typical article's size, to turn input bytes into a number of batches
MAX_BUCKETS = 4096


# -- running on any runner ------------------------------------------------------------------
# Shared with pgn_tf.pipelines.summarize.

DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
IN_PROCESS_RUNNER = "pgn_tf.pipelines.portable.InProcessRunner"
# Beam's create_runner knows DirectRunner, DataflowRunner, ... by their short names, but not
# the DaskRunner: --runner DaskRunner is mapped here. DirectRunner is mapped to InProcessRunner:
# Beam's own (2.77) first tries its Prism runner, which downloads a Go binary from GitHub at
# run time and runs the pipeline in it, and only falls back to the in-process runner when that
# fails. Nothing here downloads at run time, and the runner the tests run is the one users
# get. `--runner PrismRunner` still asks for Prism by name.
RUNNERS = {"DaskRunner": DASK_RUNNER, "DirectRunner": IN_PROCESS_RUNNER}


class InProcessRunner(PipelineRunner):
    """--runner DirectRunner: Beam's Python FnApiRunner in this process, given the pipeline's
    options as Beam's DirectRunner gives them when it picks that runner (the runner its
    fallback chooses for a batch pipeline, without the Prism attempt before it)."""

    def run_pipeline(self, pipeline, options):
        from apache_beam.portability.api import beam_provision_api_pb2
        from apache_beam.runners.portability.fn_api_runner import fn_runner
        from apache_beam.runners.portability.portable_runner import JobServiceHandle

        encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
        info = fn_runner.ExtendedProvisionInfo(
            beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
        return fn_runner.FnApiRunner(provision_info=info).run_pipeline(pipeline, options)


class Count(NamedTuple):
    """A count travelling in a PCollection beside the data (the portable stand-in for a Beam
    counter, which the DaskRunner cannot report): `name` grows by `n`."""

    name: str
    n: int = 1


def counts_of(stats: ReadStats) -> list[Count]:
    """A reader's ReadStats as counts (read, dropped: <reason>)."""
    return [Count("read", stats.read)] + [Count(f"dropped: {why}", n)
                                          for why, n in stats.dropped.items()]


class SplitCounts(beam.PTransform):
    """PCollection[T | Count] -> (PCollection[T], PCollection[Count])."""

    def expand(self, pcoll):
        return (pcoll | "Data" >> beam.Filter(lambda x: not isinstance(x, Count)),
                pcoll | "Counts" >> beam.Filter(lambda x: isinstance(x, Count)))


def hash_fraction(key: str) -> float:
    """A stable number in [0, 1) for a key (the same on every machine and Python version)."""
    return int(hashlib.sha1(key.encode()).hexdigest()[:15], 16) / 16**15


def buckets_for(input_bytes: int, batch_size: int) -> int:
    """Hash buckets for `Batches`: about one batch of ITEM_BYTES items per bucket."""
    return max(1, min(MAX_BUCKETS, math.ceil(input_bytes / (batch_size * ITEM_BYTES))))


def shards_for(input_bytes: float) -> int:
    """Files for about `input_bytes` of records: one per SHARD_BYTES (WriteShards holds a file's
    records in memory to sort them)."""
    return max(1, math.ceil(input_bytes / SHARD_BYTES))


def _chunks(kv, sort_key, size: int):
    items = sorted(kv[1], key=sort_key)
    for i in range(0, len(items), size):
        yield items[i : i + size]


class Batches(beam.PTransform):
    """PCollection[T] -> PCollection[list[T]]: lists of up to `size` elements, grouped by a hash
    of sort_key(x) into `buckets` groups, in sort_key order within a group.

    Beam's BatchElements emits its last batch from finish_bundle, which the DaskRunner drops;
    a GroupByKey batches on every runner, and the same input gives the same batches on all.
    """

    def __init__(self, sort_key, size: int, buckets: int):
        super().__init__()
        self.sort_key, self.size, self.buckets = sort_key, size, buckets

    def expand(self, pcoll):
        key, n = self.sort_key, self.buckets
        return (pcoll
                | "Bucket" >> beam.Map(lambda x: (int(hash_fraction(str(key(x))) * n), x))
                | "Group" >> beam.GroupByKey()
                | "Chunk" >> beam.FlatMap(_chunks, key, self.size))


@dataclasses.dataclass(frozen=True)
class Files:
    """A set of files WriteShards writes: PREFIX-SSSSS-of-NNNNN.SUFFIX (Beam's default shard
    names), or PREFIX.SUFFIX when num_shards is None (one file). fmt: "tfrecord" (TFRecord
    framing) or "text" (a record a line); count: the Count that says how many records each file
    got."""

    prefix: str
    suffix: str
    num_shards: int | None
    fmt: str
    count: str

    def path(self, shard: int) -> str:
        if self.num_shards is None:
            return self.prefix + self.suffix
        return f"{self.prefix}-{shard:05d}-of-{self.num_shards:05d}{self.suffix}"


def _write_shard(kv, files: dict[str, Files]) -> list[Count]:
    from apache_beam.io.tfrecordio import _TFRecordUtil  # Beam's own TFRecord framing

    (name, shard), values = kv
    spec = files[name]
    records = sorted(v for v in values if v is not None)  # (key, bytes), one order on any runner
    path = spec.path(shard)
    directory, base = FileSystems.split(path)
    tmp = FileSystems.join(directory, f".tmp-{base}-{uuid.uuid4().hex}")
    with FileSystems.create(tmp, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        for _, record in records:
            if spec.fmt == "tfrecord":
                _TFRecordUtil.write_record(f, record)
            else:
                f.write(record + b"\n")
    FileSystems.rename([tmp], [path])
    return [Count(spec.count, len(records))]


class WriteShards(beam.PTransform):
    """PCollection[(name, sort key, bytes)] -> PCollection[Count]: writes the file sets
    `files[name]` in one GroupByKey: each record to the shard of its set that its key's hash
    picks, records in (key, bytes) order within a file, every shard written (empty ones too).
    A file is written under a temporary name and renamed, so a retried write gives the same
    file. Emits, per file, Count(files[name].count, records written). A file's records are held
    in memory while it is written: num_shards bounds that.
    """

    def __init__(self, files: dict[str, Files]):
        super().__init__()
        self.files = files

    def expand(self, pcoll):
        shards = {name: spec.num_shards or 1 for name, spec in self.files.items()}
        keyed = pcoll | "Shard" >> beam.Map(lambda r: (
            (r[0], int(hash_fraction(str(r[1])) * shards[r[0]])), (r[1], r[2])))
        every = pcoll.pipeline | "EveryShard" >> beam.Create(
            [((name, i), None) for name, n in shards.items() for i in range(n)])
        return ((keyed, every)
                | "Flatten" >> beam.Flatten()
                | "Group" >> beam.GroupByKey()
                | "Write" >> beam.FlatMap(_write_shard, self.files))


class WriteCounts(beam.PTransform):
    """PCollection[Count] -> `path`: one JSON object {name: total}. Apply it last: the
    DaskRunner computes only the last step, and this one depends on every branch that counts."""

    def __init__(self, path: str):
        super().__init__()
        self.path = path

    def expand(self, counts):
        return (counts
                | "Pairs" >> beam.Map(lambda c: (c.name, c.n))
                | "Sum" >> beam.CombinePerKey(sum)
                | "One" >> beam.Map(lambda kv: (None, kv))
                | "Gather" >> beam.GroupByKey()
                | "Json" >> beam.Map(lambda kv: ("counts", "", json.dumps(dict(sorted(kv[1])),
                                                                          indent=1).encode()))
                | "Write" >> WriteShards({"counts": Files(self.path, "", None, "text",
                                                          "counts files")}))


def read_counts(path: str) -> dict[str, int]:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        text = f.read().decode("utf-8").strip()
    return json.loads(text) if text else {}


def remove_temporaries(directory: str, name_prefix: str = "") -> None:
    """Removes `.tmp-<name_prefix>*` files WriteShards' killed attempts left in `directory`
    (called after the pipeline finished, when no write is in flight)."""
    pattern = FileSystems.join(directory, f".tmp-{name_prefix}*")
    stale = [m.path for m in FileSystems.match([pattern])[0].metadata_list]
    if stale:
        FileSystems.delete(stale)


def runner_name(runner: str) -> str:
    """--runner as Beam's create_runner takes it (DaskRunner and DirectRunner -> the module
    paths of the runners they name here: RUNNERS)."""
    return RUNNERS.get(runner, runner)


def pipeline_options(runner: str, beam_args: list[str] | None, what: str) -> PipelineOptions:
    """Beam options for --runner and the other flags; Dask flags without the DaskRunner (which
    would be ignored) and an unusable dask cluster are one-line errors naming `what`."""
    beam_args = list(beam_args or [])
    options = PipelineOptions(beam_args, runner=runner_name(runner))
    dask_flags = [a.split("=")[0] for a in beam_args if a.startswith("--dask_")]
    if runner_name(runner) != DASK_RUNNER:
        if dask_flags:
            raise UserError(f"{what}: {dask_flags[0]} is a DaskRunner option; add --runner "
                            "DaskRunner")
        return options
    check_dask_cluster(options, what)
    return options


def check_dask_cluster(options: PipelineOptions, what: str) -> None:
    """Connects to the cluster the DaskRunner will use: it must answer within
    --dask_connection_timeout (default 30 s) and have a worker, and the scheduler (which
    unpickles the task graph) and every worker must import the driver's pgn_tf: the pipeline's
    functions travel as references to its modules. A worker that cannot load them closes its
    connection, and the DaskRunner would wait for it forever."""
    import importlib.metadata

    try:
        from apache_beam.runners.dask.dask_runner import DaskOptions
        from distributed import Client
    except ImportError as e:
        raise UserError(f"{what}: the DaskRunner needs dask[distributed] ({one_line(e)}); "
                        "pip install 'pgn_tf[dask]'") from None

    opts = options.view_as(DaskOptions)
    address = opts.address or opts.scheduler_file
    if not address:
        return  # the DaskRunner starts a local cluster in this process
    timeout = dask_timeout(options)
    where = f"the dask scheduler at {address}"
    try:
        client = Client(address=opts.address, scheduler_file=opts.scheduler_file,
                        timeout=timeout, set_as_default=False)
    except (OSError, ValueError) as e:  # TimeoutError is an OSError
        raise UserError(f"{what} on DaskRunner: cannot reach {where} "
                        f"({one_line(e)})") from None
    try:
        try:
            client.wait_for_workers(1, timeout=timeout)
        except TimeoutError:
            raise UserError(f"{what} on DaskRunner: {where} has no worker "
                            f"(waited {timeout} s)") from None
        want = importlib.metadata.version("pgn_tf")
        code = "import pgn_tf.pipelines.preprocess"  # where the pipelines' functions live
        try:
            client.run_on_scheduler(exec, code)
            found = {"the scheduler": client.run_on_scheduler(importlib.metadata.version,
                                                              "pgn_tf")}
        except Exception as e:
            found = {"the scheduler": e}
        imports = client.run(exec, code, on_error="return")
        versions = client.run(importlib.metadata.version, "pgn_tf", on_error="return")
        for worker in sorted(imports):
            found[f"worker {worker}"] = imports[worker] or versions.get(worker)
        for who, got in found.items():
            if isinstance(got, BaseException) or got != want:
                have = (f"cannot import pgn_tf ({one_line(got)})"
                        if isinstance(got, BaseException) else f"has pgn_tf {got}")
                raise UserError(f"{what} on DaskRunner: {who} {have}, this driver pgn_tf "
                                f"{want}: install the same pgn_tf on the scheduler and every "
                                "worker (and restart them after it changes)")
    finally:
        client.close()


def dask_timeout(options: PipelineOptions) -> int:
    """--dask_connection_timeout in seconds (default 30)."""
    from apache_beam.runners.dask.dask_runner import DaskOptions

    timeout = options.view_as(DaskOptions).timeout
    return timeout if isinstance(timeout, int) else 30


def one_line(e: BaseException) -> str:
    return " ".join(f"{type(e).__name__}: {e}".split())


WAIT_POLL_MS = 2000  # how often a DaskRunner run checks that its cluster still has workers


def run_pipeline(build_fn, options: PipelineOptions, what: str, runner: str) -> None:
    """Builds the pipeline with build_fn(p), runs it and waits. What a user can act on becomes
    a one-line UserError naming `what` and the runner, not a traceback from inside the runner:
    a worker or scheduler that cannot import the pipeline's code, a task that killed every
    worker it ran on, a dask cluster left without workers for --dask_connection_timeout."""
    p = beam.Pipeline(options=options)
    build_fn(p)
    result = None
    try:
        result = p.run()
        client = getattr(result, "client", None)  # the DaskRunner's connection
        if client is None:
            result.wait_until_finish()
        else:
            _wait_on_dask(result, client, dask_timeout(options), what, runner)
    except ImportError as e:
        raise UserError(f"{what} on {runner}: {one_line(e)} (install pgn_tf and the pipeline's "
                        "dependencies where it runs)") from None
    except RuntimeError as e:
        if "deserialization of the task graph" not in str(e):
            raise
        raise UserError(f"{what} on {runner}: the dask scheduler cannot load the pipeline "
                        f"({one_line(e.__cause__ or e)}): the scheduler and every worker need "
                        "this driver's pgn_tf, restarted after it changes") from None
    except Exception as e:
        if type(e).__name__ != "KilledWorker":  # distributed's: a task killed every worker
            raise
        raise UserError(f"{what} on {runner}: {one_line(e)}") from None
    finally:
        client = getattr(result, "client", None)
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()


def _wait_on_dask(result, client, grace_s: int, what: str, runner: str) -> None:
    """result.wait_until_finish(), but a cluster without a worker for grace_s seconds (all
    lost, or closed because they could not load the pipeline) ends the run with a UserError."""
    alone_since = None
    while True:
        try:
            result.wait_until_finish(duration=WAIT_POLL_MS)
            return
        except TimeoutError:
            pass
        if client.nthreads():
            alone_since = None
        elif alone_since is None:
            alone_since = time.monotonic()
        elif time.monotonic() - alone_since > grace_s:
            with contextlib.suppress(Exception):
                result.cancel()
            raise UserError(f"{what} on {runner}: the dask cluster has had no worker for "
                            f"{grace_s} s (their logs say why; a worker that cannot import "
                            "pgn_tf closes); the run was cancelled")


def _match_part(part: int, patterns: list[str], parts: int) -> list[str]:
    paths = sorted(m.path for r in FileSystems.match(patterns) for m in r.metadata_list)
    return paths[part::parts]


class MatchParts(beam.PTransform):
    """PBegin -> PCollection[str]: the paths matching `patterns`, matched on the workers in
    `parts` disjoint parts (every parts-th path of the sorted list). A runner that splits work
    by the elements of a pipeline's first step (the DaskRunner, by --dask_npartitions) reads the
    parts in parallel; the paths are not listed in the pipeline itself, which stays small for
    hundreds of thousands of files."""

    def __init__(self, patterns: list[str], parts: int = 1):
        super().__init__()
        self.patterns, self.parts = patterns, max(1, parts)

    def expand(self, pbegin):
        return (pbegin
                | "Parts" >> beam.Create(list(range(self.parts)))
                | "Match" >> beam.FlatMap(_match_part, self.patterns, self.parts))


