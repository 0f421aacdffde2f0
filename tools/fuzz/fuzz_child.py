"""The child process of a fuzz campaign (serving.fuzz's `run_campaign` and `replay` start it):

    python -m tools.fuzz.fuzz_child --target CAMPAIGN [--counts FILE] [libFuzzer flags] [CORPUS]
    python -m tools.fuzz.fuzz_child --target CAMPAIGN --counts FILE --replay FILE...

CAMPAIGN is one of fuzz_harness.CAMPAIGNS. The decoder campaigns (grpc, rest, all) write the
stand-in export and hand serving.fuzz_harness' `Harness` and serving.fuzz_mutators' `Mutator`
to atheris; the transport campaigns start the real server on loopback
(serving.fuzz_loopback) over the stand-in export (http, grpc_wire) or the real model (model)
and hand atheris their harness and mutator (serving.fuzz_http, fuzz_grpc_wire and
fuzz_grpc_inputs, fuzz_model).
The serving modules (and for REST, waitress') are instrumented first. libFuzzer's flags and
corpus dirs go to atheris as they are. A process of its own, so an abort or a signal is a crash
the parent counts and keeps as a reproducer.

A campaign that ran all its inputs exits 0: atheris installs a Python handler for libFuzzer's
-timeout alarm (SIGALRM, every timeout/2 + 1 seconds) and leaves the interval timer running
after the last input, while the process writes its counts and ends; a signal that arrives once
the handler can no longer run killed a finished campaign with SIGALRM. The first exit handler
(`_end_alarm`) stops the timer and ignores the signal: no input runs any more, so no input can
time out.
"""

from __future__ import annotations

if __name__ == "__main__":  # the child process: quiet start, then main() (pgn_tf.commands)
    from pgn_tf.commands import run_command

    raise SystemExit(run_command("tools.fuzz.fuzz_child"))
import argparse
import atexit
import collections
import json
import os
import shutil
import signal
import sys
import tempfile
import time

from tools.fuzz.fuzz_harness import (
    CAMPAIGNS,
    GRPC_METHODS,
    TARGETS,
    TEXTS,
    Harness,
    grpc_seeds,
    instrument,
    seed_corpus,
    serving_modules,
    write_stand_in_export,
)
from tools.fuzz.fuzz_mutators import Mutator


def _dump(path: str | None, record: dict) -> None:
    if path is None:
        return
    with open(path + ".tmp", "w") as f:
        json.dump(record, f, sort_keys=True)
    os.replace(path + ".tmp", path)


def _end_alarm() -> None:
    """The campaign is over: libFuzzer's unit-timeout alarm is stopped (module docstring)."""
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, signal.SIG_IGN)


def _transport_modules(target: str) -> list:
    """What a transport campaign instruments besides serving_modules(): the explanation page
    and metrics routes, the gRPC server module where there is one, and waitress' parser,
    channel, tasks and buffers for the campaigns that go through REST."""
    import importlib

    from pgn_tf.serving import explain, metrics

    out = [explain, metrics]
    try:
        out.append(importlib.import_module("pgn_tf.serving.grpc_server"))
    except ImportError:
        pass
    if target in ("http", "model"):
        from waitress import buffers, channel, parser, receiver, task, utilities

        out += [parser, channel, task, receiver, utilities, buffers]
    return out


def _grpc_payloads(version_dir: str) -> dict:
    """{index of GRPC_METHODS: [serialized valid requests]}."""
    out = collections.defaultdict(list)
    for msg in grpc_seeds(version_dir):
        for i, method in enumerate(GRPC_METHODS):
            if isinstance(msg, method.request):
                out[i].append(msg.SerializeToString())
    return out


def _copy_export(src: str, base: str) -> None:
    """BASE/pgn/1: the newest version of the export base path `src` (SRC/pgn/N), copied: the
    server serves no version dir that leads out of its base path."""
    from tools.fuzz.fuzz_harness import MODEL_NAME, MODEL_VERSION

    model = os.path.join(src, MODEL_NAME) if os.path.isdir(os.path.join(src, MODEL_NAME)) \
        else src
    versions = sorted((int(v) for v in os.listdir(model) if v.isdigit()), reverse=True)
    if not versions:
        raise ValueError(f"--model_base_path {src} holds no version dir of model "
                         f"'{MODEL_NAME}' (expected {src}/{MODEL_NAME}/N)")
    shutil.copytree(os.path.join(model, str(versions[0])),
                    os.path.join(base, MODEL_NAME, str(MODEL_VERSION)))


def _transport(target: str, base: str, model_base_path: str | None):
    """(harness, mutator factory, seeds, the LoopbackServer) of a transport campaign."""
    from tools.fuzz.fuzz_loopback import LoopbackServer

    if target == "model":
        from tools.fuzz import fuzz_model

        if model_base_path:
            _copy_export(model_base_path, base)
        else:
            fuzz_model.write_model_export(base)
        loopback = LoopbackServer(base, max_decode_work=fuzz_model.MAX_DECODE_WORK)
        return (fuzz_model.ModelHarness(loopback), fuzz_model.ModelMutator,
                fuzz_model.model_seeds(), loopback)
    version_dir = write_stand_in_export(base)
    if target == "http":
        from tools.fuzz import fuzz_http, fuzz_http_requests

        loopback = LoopbackServer(base)
        harness = fuzz_http.HttpHarness(loopback)
        return (harness, lambda mutate: fuzz_http_requests.HttpMutator(harness.port, mutate),
                fuzz_http_requests.http_seeds(harness.port), loopback)
    from tools.fuzz import fuzz_grpc_inputs, fuzz_grpc_wire

    loopback = LoopbackServer(base, **fuzz_grpc_wire.server_options())
    return (fuzz_grpc_wire.WireHarness(loopback), fuzz_grpc_inputs.WireMutator,
            fuzz_grpc_inputs.wire_seeds(_grpc_payloads(version_dir)), loopback)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m tools.fuzz.fuzz_child",
                                description=__doc__.splitlines()[0])
    p.add_argument("--target", choices=sorted(CAMPAIGNS), required=True)
    p.add_argument("--counts", help="where the outcome counts are written (JSON)")
    p.add_argument("--seed_corpus", help="a dir the seed corpus is written to first")
    p.add_argument("--export_base", help="where the export is written (default: a temporary "
                   "dir)")
    p.add_argument("--model_base_path", help="the model campaign: serve the newest version of "
                   "this export base path (BASE/pgn/N) instead of a fresh tiny model")
    p.add_argument("--replay", nargs="+", metavar="FILE",
                   help="answer these inputs once each, without atheris")
    args, libfuzzer_args = p.parse_known_args(argv)
    base = args.export_base or tempfile.mkdtemp(prefix="pgn-fuzz-")
    shutil.rmtree(base, ignore_errors=True)
    if not args.export_base:
        atexit.register(shutil.rmtree, base, True)
    transport = args.target not in TARGETS
    if not args.replay:
        import atheris  # noqa: F401  (a missing atheris fails before the export is written)

        modules = serving_modules() + (_transport_modules(args.target) if transport else [])
        instrument(modules)  # before the servers are built: their closures carry it too
        if transport:
            from tools.fuzz.fuzz_loopback import instrument_features

            instrument_features()
    loopback = None
    if transport:
        harness, make_mutator, seeds, loopback = _transport(args.target, base,
                                                            args.model_base_path)
    else:
        methods = TARGETS[args.target]
        version_dir = write_stand_in_export(base)
        harness = Harness(base, methods)
        seeds = seed_corpus(methods, version_dir)

        def make_mutator(mutate):
            return Mutator(methods, mutate, TEXTS)

    stages = loopback.stages if loopback is not None else None
    if args.replay:
        outcomes = []
        for path in args.replay:
            with open(path, "rb") as f:
                outcomes.append(harness.one(f.read()))
            _dump(args.counts, {"outcomes": outcomes})  # after each: a crash keeps the rest
            print(f"{path}: {outcomes[-1]}", flush=True)
        if loopback is not None:
            loopback.stop()
        return 0

    import atheris

    if args.seed_corpus:
        os.makedirs(args.seed_corpus, exist_ok=True)
        for i, data in enumerate(seeds):
            with open(os.path.join(args.seed_corpus, f"seed-{i:03d}"), "wb") as f:
                f.write(data)
    started = time.monotonic()
    executed = [0]

    def write() -> None:
        record = {"counts": dict(harness.counts), "inputs": executed[0],
                  "seconds": time.monotonic() - started}
        if stages is not None:
            record["stages"] = dict(stages.totals)
        _dump(args.counts, record)

    atexit.register(write)  # atheris runs the exit handlers when -atheris_runs are done
    atexit.register(_end_alarm)  # registered last: runs first

    def test_one_input(data: bytes) -> None:
        executed[0] += 1
        harness.one(data)
        if executed[0] % 2000 == 0:
            write()

    # atheris.Mutate is looked up on each call: atheris binds it once Fuzz() starts
    mutator = make_mutator(lambda data, max_size: atheris.Mutate(data, max_size))
    atheris.Setup([sys.argv[0], *libfuzzer_args], test_one_input, custom_mutator=mutator)
    atheris.Fuzz()
    return 0
