"""The command lines' one way in: a quiet start, then the command module's main().

Both forms of a command come through `run_command`: the console scripts of setup.py (`pgn-train`
is `pgn_tf.commands:train`) and `python -m pgn_tf.train`, whose module begins with

    if __name__ == "__main__":  # the command line: quiet start, then main() (pgn_tf.commands)
        from pgn_tf.commands import run_command

        raise SystemExit(run_command("pgn_tf.train"))

so the quiet start (pgn_tf.utils.quiet) is in place before the module's imports load
TensorFlow, and the command runs from its importable module (`pgn_tf.train`, not `__main__`:
Beam pickles a pipeline's functions by their module's name). Importing a command module, or this
one, changes nothing in the process: no environment variable, import hook, process or argv read.
"""

from __future__ import annotations

import importlib

# console script -> its module (each module's main(argv) parses, calls the library, prints)
COMMANDS = {
    "pgn-train": "pgn_tf.train",
    "pgn-evaluate": "pgn_tf.evaluate",
    "pgn-summarize": "pgn_tf.summarize",
    "pgn-export": "pgn_tf.export",
    "pgn-serve": "pgn_tf.serving.server",
    "pgn-pipeline": "pgn_tf.pipelines.run",
    "pgn-preprocess": "pgn_tf.pipelines.preprocess",
    "pgn-batch-summarize": "pgn_tf.pipelines.summarize",
    "pgn-average-checkpoints": "pgn_tf.average_checkpoints",
    "pgn-tune": "pgn_tf.tune",
    "pgn-quickstart": "pgn_tf.quickstart",
}


def run_command(module: str, argv: list[str] | None = None) -> int:
    """Quiets the start (unless --verbose in argv, default sys.argv[1:], or PGN_TF_VERBOSE),
    then imports `module` and returns its main(argv)."""
    from pgn_tf.utils import quiet

    quiet.start(argv)
    return importlib.import_module(module).main(argv)


def _console(name: str):
    def main() -> int:
        return run_command(COMMANDS[name])

    main.__name__ = main.__qualname__ = name.removeprefix("pgn-").replace("-", "_")
    main.__doc__ = f"The `{name}` console script: `python -m {COMMANDS[name]}`."
    return main


train = _console("pgn-train")
evaluate = _console("pgn-evaluate")
summarize = _console("pgn-summarize")
export = _console("pgn-export")
serve = _console("pgn-serve")
pipeline = _console("pgn-pipeline")
preprocess = _console("pgn-preprocess")
batch_summarize = _console("pgn-batch-summarize")
average_checkpoints = _console("pgn-average-checkpoints")
tune = _console("pgn-tune")
quickstart = _console("pgn-quickstart")
