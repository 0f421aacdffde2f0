"""`python -m pgn_tf.train`: train a model in a model dir (pgn_tf.model_dir).

    python -m pgn_tf.train --config see2017_pgn --train_data train.jsonl.gz \
        --eval_data validation.jsonl.gz --model_dir runs/pgn [--set train.max_steps=1000 ...]

Without --train_data it trains on the bundled synthetic corpus (pgn_tf.data.synthetic) with the
`tiny` preset. The flags become one call of the library, pgn_tf.training.run.train, which
validates the run before anything is written (config, model-dir compatibility, vocab, data
paths), then trains. Checkpoints go to <model_dir>/ckpt (resumed automatically, the data order continuing), the best one to
<model_dir>/best, TensorBoard logs to <model_dir>/{train,eval}. Running again with
`--set model.coverage=true` in a model dir trained without coverage converts the model (See et
al.'s final phase) from the previous phase's best checkpoint: the new coverage weight starts at
zero and training continues with a fresh optimizer. Likewise `--set train.objective=mixed`
(Paulus et al.'s ML+RL phase, for any model) continues with a fresh optimizer at
train.rl_learning_rate; its best checkpoint is then the highest validation ROUGE.

`--strategy multi_worker` (MultiWorkerMirroredStrategy): every worker runs the same command with
its own TF_CONFIG; the chief (task "chief", or worker 0) alone writes the model dir, which every
worker must see (a shared file system). When a worker dies the others stop with one error line;
restarted, all of them resume from the last checkpoint, the data order continuing.
"""

from __future__ import annotations

if __name__ == "__main__":  # the command line: quiet start, then main() (pgn_tf.commands)
    from pgn_tf.commands import run_command

    raise SystemExit(run_command("pgn_tf.train"))
import argparse
import json

from pgn_tf.data.articles import EXAMPLE_FORMATS
from pgn_tf.training import run as training_run
from pgn_tf.utils import logs
from pgn_tf.utils.errors import run_cli
from pgn_tf.utils.quiet import add_verbose_flag


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pgn_tf.train", description=__doc__.splitlines()[0])
    p.add_argument("--config", help="preset name or YAML/JSON file (default: tiny without "
                   "--train_data, else see2017_pgn)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one config value (repeatable)")
    p.add_argument("--train_data", help="TFRecord glob, JSONL(.gz), .story dir, .bin glob or "
                   "tfds:DATA_DIR[:split]; default: the synthetic corpus")
    p.add_argument("--eval_data")
    p.add_argument("--data_format", choices=EXAMPLE_FORMATS)
    p.add_argument("--model_dir", default="runs/quickstart")
    p.add_argument("--strategy", default="mirrored", help="mirrored | multi_worker | default")
    p.add_argument("--cpu_devices", type=int, default=1,
                   help="split the CPU into N logical devices (MirroredStrategy over them)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_verbose_flag(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """Parses the flags, calls pgn_tf.training.run.train with them (its log lines shown as
    `[pgn_tf] ...`) and prints its result as one JSON line; 2 on an error the user can fix."""
    a = build_parser().parse_args(argv)

    def train() -> None:
        result = training_run.train(
            a.model_dir, a.config, a.set, a.train_data, a.eval_data, a.data_format,
            strategy=a.strategy, cpu_devices=a.cpu_devices, progress=not a.quiet)
        print("[pgn_tf] " + json.dumps(result.as_dict()), flush=True)

    with logs.to_stdout():
        return run_cli("pgn_tf.train", train)
