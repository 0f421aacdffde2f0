"""The child process of a fuzz campaign (serving.fuzz's `run_campaign` and `replay` start it):

    python -m pgn_tf.serving.fuzz_child --target grpc|rest|all [--counts FILE] [libFuzzer flags] [CORPUS]
    python -m pgn_tf.serving.fuzz_child --target T --counts FILE --replay FILE...

It writes the stand-in export, instruments the serving modules and hands serving.fuzz_harness'
`Harness` and serving.fuzz_mutators' `Mutator` to atheris; libFuzzer's flags and corpus dirs go
to atheris as they are. A process of its own, so an abort or a signal is a crash the parent
counts and keeps as a reproducer.
"""

from __future__ import annotations

if __name__ == "__main__":  # the child process: quiet start, then main() (pgn_tf.commands)
    from pgn_tf.commands import run_command

    raise SystemExit(run_command("pgn_tf.serving.fuzz_child"))
import argparse
import atexit
import json
import os
import shutil
import sys
import tempfile
import time

from pgn_tf.serving.fuzz_harness import (
    TARGETS,
    TEXTS,
    Harness,
    instrument,
    seed_corpus,
    serving_modules,
    write_stand_in_export,
)
from pgn_tf.serving.fuzz_mutators import Mutator


def _dump(path: str | None, record: dict) -> None:
    if path is None:
        return
    with open(path + ".tmp", "w") as f:
        json.dump(record, f, sort_keys=True)
    os.replace(path + ".tmp", path)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m pgn_tf.serving.fuzz_child",
                                description=__doc__.splitlines()[0])
    p.add_argument("--target", choices=sorted(TARGETS), required=True)
    p.add_argument("--counts", help="where the outcome counts are written (JSON)")
    p.add_argument("--seed_corpus", help="a dir the seed corpus is written to first")
    p.add_argument("--export_base", help="where the stand-in export is written (default: a "
                   "temporary dir)")
    p.add_argument("--replay", nargs="+", metavar="FILE",
                   help="answer these inputs once each, without atheris")
    args, libfuzzer_args = p.parse_known_args(argv)
    methods = TARGETS[args.target]
    base = args.export_base or tempfile.mkdtemp(prefix="pgn-fuzz-")
    shutil.rmtree(base, ignore_errors=True)
    if not args.export_base:
        atexit.register(shutil.rmtree, base, True)
    version_dir = write_stand_in_export(base)
    if args.replay:
        harness = Harness(base, methods)
        outcomes = []
        for path in args.replay:
            with open(path, "rb") as f:
                outcomes.append(harness.one(f.read()))
            _dump(args.counts, {"outcomes": outcomes})  # after each: a crash keeps the rest
            print(f"{path}: {outcomes[-1]}", flush=True)
        return 0

    import atheris

    if args.seed_corpus:
        os.makedirs(args.seed_corpus, exist_ok=True)
        for i, data in enumerate(seed_corpus(methods, version_dir)):
            with open(os.path.join(args.seed_corpus, f"seed-{i:03d}"), "wb") as f:
                f.write(data)
    instrument(serving_modules())
    harness = Harness(base, methods)
    started = time.monotonic()

    def write() -> None:
        _dump(args.counts, {"counts": dict(harness.counts), "inputs": sum(harness.counts.values()),
                            "seconds": time.monotonic() - started})

    atexit.register(write)  # atheris runs it when -atheris_runs are done

    def test_one_input(data: bytes) -> None:
        harness.one(data)
        if sum(harness.counts.values()) % 2000 == 0:
            write()

    # atheris.Mutate is looked up on each call: atheris binds it once Fuzz() starts
    mutator = Mutator(methods, lambda data, max_size: atheris.Mutate(data, max_size), TEXTS)
    atheris.Setup([sys.argv[0], *libfuzzer_args], test_one_input, custom_mutator=mutator)
    atheris.Fuzz()
    return 0
