"""`python -m pgn_tf.pipelines.run --config pipeline.yaml [--set SECTION.KEY=VALUE ...]`:
preprocess -> train -> export -> evaluate -> bless -> push, TFX-style (pgn_tf.pipelines.flow
says what each step does, what a run skips and resumes, and the config's keys).
"""

from __future__ import annotations

if __name__ == "__main__":  # the command line: quiet start, then main() (pgn_tf.commands)
    from pgn_tf.commands import run_command

    raise SystemExit(run_command("pgn_tf.pipelines.run"))
import argparse
import json

from pgn_tf.pipelines.flow import load_config, run
from pgn_tf.utils import logs
from pgn_tf.utils.errors import run_cli
from pgn_tf.utils.quiet import add_verbose_flag


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pgn_tf.pipelines.run",
                                description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="pipeline YAML")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bars (training, decoding for evaluate and bless)")
    add_verbose_flag(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """Parses the flags, runs the flow (each step's lines shown as `[pipelines.run] ...`) and
    prints whether the model was blessed and where it was pushed."""
    a = build_parser().parse_args(argv)

    def flow() -> None:
        out = run(load_config(a.config, a.set), verbose=0 if a.quiet else None)
        print("[pipelines.run] " + json.dumps({"blessed": out["bless"]["blessed"],
                                               **out["push"]}), flush=True)

    with logs.to_stdout():
        return run_cli("pgn_tf.pipelines.run", flow)
