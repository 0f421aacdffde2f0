"""The command lines' one way in: oneDNN on and a quiet start, then the command module's main().

COMMANDS is the one table of commands: setup.py reads it (without importing pgn_tf) and makes
each row a console script, `pgn-train = pgn_tf.commands:train`. Both forms of a command come
through `run_command`: the console scripts and `python -m pgn_tf.train`, whose module begins with

    if __name__ == "__main__":  # the command line: quiet start, then main() (pgn_tf.commands)
        from pgn_tf.commands import run_command

        raise SystemExit(run_command("pgn_tf.train"))

so the quiet start (pgn_tf.utils.quiet) and TensorFlow's oneDNN setting (pgn_tf.utils.onednn)
are in place before the module's imports load TensorFlow, and the command runs from its
importable module (`pgn_tf.train`, not `__main__`: Beam pickles a pipeline's functions by their
module's name). A `python -m` module that is not a console script is in NOT_COMMANDS, with
the reason. Importing a command module, or this one, changes nothing in the process: no
environment variable, import hook, process or argv read.
"""

from __future__ import annotations

import importlib

# console script -> its module. Each module is a command and nothing else: build_parser() and
# main(argv), which parses, calls one library function with typed arguments, prints its result
# and returns the exit code. No other module imports a command module.
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
    "pgn-significance": "pgn_tf.significance",
    "pgn-quickstart": "pgn_tf.quickstart",
}

# The other `python -m` modules of the package (they start through run_command too) -> why
# each is not a console script.
NOT_COMMANDS = {
    "pgn_tf.data.synthetic": "writes the bundled synthetic corpus, which pgn-train and "
                             "pgn-quickstart write themselves when given no data",
    "pgn_tf.pipelines.debian_descriptions": "builds one corpus once, from the apt lists of a "
                                            "Debian machine",
    "pgn_tf.serving.client": "an example client of the stock tensorflow-serving-api stubs: "
                             "programs call its summarize() function",
}


def run_command(module: str, argv: list[str] | None = None) -> int:
    """Turns TensorFlow's oneDNN kernels on where the user left them unset (pgn_tf.utils.onednn:
    TensorFlow's default leaves them off on CPUs with AVX2 only), quiets the start (unless
    --verbose in argv, default sys.argv[1:], or PGN_TF_VERBOSE), then imports `module` and
    returns its main(argv)."""
    from pgn_tf.utils import onednn, quiet

    onednn.start()
    quiet.start(argv)
    return importlib.import_module(module).main(argv)


def _console(name: str):
    """The console script `name`'s function: run_command of its module. Its Python name is the
    console name without `pgn-`, dashes as underscores (setup.py's entry points name it so)."""

    def main() -> int:
        return run_command(COMMANDS[name])

    main.__name__ = main.__qualname__ = name.removeprefix("pgn-").replace("-", "_")
    main.__doc__ = f"The `{name}` console script: `python -m {COMMANDS[name]}`."
    return main


# train, evaluate, ..., batch_summarize: one function per row of the table (setup.py's
# `pgn-train = pgn_tf.commands:train`)
globals().update({f.__name__: f for f in map(_console, COMMANDS)})
