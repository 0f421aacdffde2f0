"""The request decoders fuzzed: a coverage-guided campaign (atheris, libFuzzer) over what turns a
client's bytes into tensors, through the server's own handlers.

`run_campaign` (a libFuzzer campaign of N inputs) and `replay` (reproducers fed once each)
run serving.fuzz_child in a process of its own and read back its counts and crash files;
tools/fuzz/fuzz_decoders.py and tests/serving/test_fuzz.py call them.

Inputs. A fuzz input is one request: its first byte picks a method of the target's table
(`TARGETS`: gRPC Predict, GetModelMetadata, GetModelStatus and Classify; REST POST :predict on
three routes, and gzip-encoded), the rest is the payload: a serialized request for gRPC, a JSON
body (or its gzip) for REST; serving.fuzz_mutators mutates both, structure-aware. A gRPC
payload goes where the gRPC server sends it: the method is looked up among the handlers
`grpc_service.add_to_server` registers (Classify is not one: gRPC answers UNIMPLEMENTED before
it reads a byte), then their request parser, the handler (serving.validation's checks,
tf.make_ndarray, the contract's ranges, the work budget: serving.predict) and the response
serializer. A REST body goes through `rest_service.RestApp`, called as waitress calls it. The
server's default limits apply.
Accepted requests run on a stand-in export (`write_stand_in_export`): the real export's archive
(pgn_tf.saved_model.export: its three signatures and input specs, summarize_options' range
assertions, the serving contract, the warm-up requests) around a summarizer that echoes its
articles instead of running a beam search, so an input costs its parsing, checks and conversion
to tensors and a run of a small graph, not a decode.

Outcomes. A request answered OK (HTTP 200) is accepted; one answered with a client's status
(`CLIENT_CODES`, or their HTTP statuses) is refused; both are counted per method (`--counts`).
Anything else is a finding: another status (INTERNAL: an exception the server did not expect),
an exception escaping a handler, a status message longer than serving.status allows or naming
the export's path, an input whose answer raised the process' RSS more than MAX_GROWTH_MB. The
harness raises `Finding`, which libFuzzer keeps as a crash-* reproducer;
an abort or a signal (TensorFlow's C++ CHECK failures on malformed TensorProtos) kills the
process and libFuzzer's handler keeps the input the same way. Hence the child process.

Coverage is Python's: the functions of the serving modules a request passes through, and
tf.make_ndarray, carry atheris' instrumentation (`instrument`); TensorFlow's C++ is not
instrumented, so libFuzzer's `cov:` counts Python branches.

The child's target lives in serving.fuzz_harness. Importing either module needs no atheris
(the child imports it where it starts fuzzing).

The transport campaigns (`TRANSPORT_CAMPAIGNS`: http, grpc_wire, model) fuzz a running server
instead of its handlers: the REST server's own waitress channel and parser (serving.fuzz_http),
HTTP/2 streams to the gRPC server (serving.fuzz_grpc_wire), and the real model's signatures
through both (serving.fuzz_model); serving.fuzz_loopback starts the server and counts the
stages each input reached (`CampaignResult.stages`: transport, decoder, model_run). Their
findings are those above plus each campaign's own (its module says which).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys

from tools.fuzz.fuzz_harness import CAMPAIGNS

STAGES = ("transport", "decoder", "model_run")  # serving.fuzz_loopback's


@dataclasses.dataclass
class CampaignResult:
    """What one campaign's child process reported.

    executed: inputs run; seconds: the fuzzing's wall time (after start-up); cov / ft:
    libFuzzer's coverage counters (Python branches, features) at the end; corpus: inputs in
    the corpus at the end, new_units: those the campaign added; peak_rss_mb: the rss libFuzzer
    last printed (the harness resets the high-water mark before each input, so this is the
    peak of the latest inputs, not of the whole campaign: the per-input check covers that);
    crashes, timeouts, ooms: the reproducers libFuzzer wrote (crash-*, timeout-*, oom-* /
    leak-*); outcomes: {"grpc Predict INVALID_ARGUMENT": n, ...}; stages: {stage: inputs that
    reached it} (transport campaigns; STAGES); finished: libFuzzer said it ran all its inputs
    ("Done N in S second(s)"); returncode: the child's exit status (0: all runs, no finding);
    log: its output."""

    target: str
    runs: int
    seed: int
    executed: int
    seconds: float
    cov: int
    ft: int
    corpus: int
    new_units: int
    peak_rss_mb: int
    crashes: list
    timeouts: list
    ooms: list
    outcomes: dict
    returncode: int
    log: str
    stages: dict = dataclasses.field(default_factory=dict)
    finished: bool = False

    @property
    def ok(self) -> bool:
        """All inputs ran, the child exited 0, and no reproducer was written."""
        return (self.finished and self.returncode == 0
                and not (self.crashes or self.timeouts or self.ooms))

    def share(self, stage: str) -> float:
        """The share of the inputs run that reached `stage`."""
        return self.stages.get(stage, 0) / self.executed if self.executed else 0.0

    @property
    def inputs_per_s(self) -> float:
        return self.executed / self.seconds if self.seconds else 0.0

    def tally(self, kind: str) -> tuple[int, int]:
        """(accepted, refused) requests of one kind, "grpc" or "rest"."""
        accepted = refused = 0
        for outcome, n in self.outcomes.items():
            if outcome.startswith(kind + " "):
                if outcome.endswith((" OK", " 200")):
                    accepted += n
                else:
                    refused += n
        return accepted, refused

    def summary(self) -> dict:
        """The figures, without the per-method outcomes."""
        out = {k: v for k, v in dataclasses.asdict(self).items() if k != "outcomes"}
        out["inputs_per_s"] = round(self.inputs_per_s, 1)
        out["ok"] = self.ok
        if self.stages:
            for stage in STAGES:
                out[f"{stage}_share"] = round(self.share(stage), 4)
        else:
            for kind in ("grpc", "rest"):
                out[f"{kind}_accepted"], out[f"{kind}_refused"] = self.tally(kind)
        return out


_STATUS_LINE = re.compile(rb"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/.* rss: (\d+)Mb",
                          re.M)
_DONE = re.compile(rb"^Done (\d+) in", re.M)


def parse_stats(text: bytes) -> dict:
    """libFuzzer's output -> {"executed", "cov", "ft", "corpus", "peak_rss_mb", "finished"}: its
    last status line (cov and ft only grow, and each growth prints one; rss is the process'
    peak) and atheris' "Done N in S second(s)" (finished)."""
    out = {"executed": 0, "cov": 0, "ft": 0, "corpus": 0, "peak_rss_mb": 0, "finished": False}
    lines = _STATUS_LINE.findall(text)
    if lines:
        n, cov, ft, corp, rss = (int(x) for x in lines[-1])
        out.update(executed=n, cov=cov, ft=ft, corpus=corp, peak_rss_mb=rss)
    done = _DONE.findall(text)
    if done:
        out["executed"] = int(done[-1])
        out["finished"] = True
    return out


def _child(args: list, log: str, wall_timeout_s: float | None) -> int:
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    env["CUDA_VISIBLE_DEVICES"] = ""  # parsing is fuzzed: no GPU wanted
    env["PYTHONHASHSEED"] = "0"  # a seeded campaign repeats itself
    with open(log, "wb") as f:
        return subprocess.run([sys.executable, "-m", "tools.fuzz.fuzz_child", *args], stdout=f,
                              stderr=subprocess.STDOUT, env=env,
                              timeout=wall_timeout_s).returncode


def _files(directory: str, prefix: str = "") -> list:
    return sorted(os.path.join(directory, f) for f in os.listdir(directory)
                  if f.startswith(prefix))


def run_campaign(target: str, runs: int, seed: int, out_dir: str, timeout_s: int = 30,
                 max_len: int = 8192, rss_limit_mb: int = 6144,
                 wall_timeout_s: float | None = None,
                 model_base_path: str | None = None,
                 max_total_time_s: int = 0) -> CampaignResult:
    """Fuzzes `target` (one of CAMPAIGNS) for `runs` inputs in a child process, from the seed
    corpus plus what earlier campaigns kept in out_dir/corpus-TARGET; reproducers go to
    out_dir/artifacts/, the child's output to out_dir/fuzz-TARGET.log.

    Args:
      seed: libFuzzer's -seed (a campaign from the same corpus repeats itself);
      timeout_s: libFuzzer's -timeout, seconds one input may take (else a timeout-* reproducer);
      max_len: the longest input; rss_limit_mb: libFuzzer's -rss_limit_mb (TensorFlow takes
        about 1 GB before the first input); wall_timeout_s: the child is killed after this long
        (subprocess.TimeoutExpired; None: no limit); model_base_path: the model campaign
        serves this export (BASE/pgn/N) instead of a fresh tiny model (serving.fuzz_model);
        max_total_time_s: libFuzzer's -max_total_time, the campaign stops after this long
        (0: no limit), not finished.
    """
    if target not in CAMPAIGNS:
        raise ValueError(f"unknown target '{target}' ({', '.join(CAMPAIGNS)})")
    corpus = os.path.join(out_dir, f"corpus-{target}")
    artifacts = os.path.join(out_dir, "artifacts")
    for d in (corpus, artifacts):
        os.makedirs(d, exist_ok=True)
    counts = os.path.join(out_dir, f"counts-{target}.json")
    log = os.path.join(out_dir, f"fuzz-{target}.log")
    if os.path.exists(counts):
        os.remove(counts)
    before = set(_files(artifacts))
    kept = len(_files(corpus))
    extra = ["--model_base_path", model_base_path] if model_base_path else []
    rc = _child(["--target", target, "--counts", counts, "--seed_corpus", corpus,
                 "--export_base", os.path.join(out_dir, f"export-{target}"), *extra,
                 f"-atheris_runs={runs}", f"-seed={seed}",
                 f"-artifact_prefix={artifacts}{os.sep}", f"-timeout={timeout_s}",
                 f"-max_len={max_len}", f"-rss_limit_mb={rss_limit_mb}", "-reload=0",
                 f"-max_total_time={max_total_time_s}", corpus],
                log, wall_timeout_s)
    with open(log, "rb") as f:
        stats = parse_stats(f.read())
    outcomes, seconds, stages = {}, 0.0, {}
    if os.path.exists(counts):
        with open(counts) as f:
            c = json.load(f)
        outcomes, seconds, stages = c["counts"], c["seconds"], c.get("stages", {})
        stats["executed"] = max(stats["executed"], c["inputs"])
    new = [f for f in _files(artifacts) if f not in before]
    seeds = sum(1 for f in os.listdir(corpus) if f.startswith("seed-"))
    return CampaignResult(
        target=target, runs=runs, seed=seed, seconds=round(seconds, 1),
        new_units=max(0, len(_files(corpus)) - max(kept, seeds)),
        crashes=[f for f in new if os.path.basename(f).startswith("crash-")],
        timeouts=[f for f in new if os.path.basename(f).startswith("timeout-")],
        ooms=[f for f in new if os.path.basename(f).startswith(("oom-", "leak-"))],
        outcomes=outcomes, returncode=rc, log=log, stages=stages, **stats)


@dataclasses.dataclass
class ReplayResult:
    """outcomes: each input's outcome in order ("grpc Predict INVALID_ARGUMENT"), as far as
    the child got; returncode: 0 when every input was answered without a finding (a Finding
    exits 1, an abort or a signal with its negative number); log: the child's output."""

    outcomes: list
    returncode: int
    log: str


def replay(target: str, inputs: list[bytes], out_dir: str,
           wall_timeout_s: float | None = 600) -> ReplayResult:
    """Feeds each of `inputs` (fuzz inputs of `target`, e.g. a campaign's crash-* files) once
    through the Harness in a child process, without atheris."""
    if target not in CAMPAIGNS:
        raise ValueError(f"unknown target '{target}' ({', '.join(CAMPAIGNS)})")
    os.makedirs(out_dir, exist_ok=True)
    files = []
    for i, data in enumerate(inputs):
        files.append(os.path.join(out_dir, f"input-{i}"))
        with open(files[-1], "wb") as f:
            f.write(data)
    counts = os.path.join(out_dir, f"replay-{target}.json")
    log = os.path.join(out_dir, f"replay-{target}.log")
    if os.path.exists(counts):
        os.remove(counts)
    rc = _child(["--target", target, "--counts", counts, "--replay", *files], log,
                wall_timeout_s)
    outcomes = []
    if os.path.exists(counts):
        with open(counts) as f:
            outcomes = json.load(f)["outcomes"]
    return ReplayResult(outcomes, rc, log)


# -- the child process -----------------------------------------------------------------------
