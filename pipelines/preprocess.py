"""`python -m pgn_tf.pipelines.preprocess`: raw corpus -> split, deduplicated TFRecord shards +
vocab, by an Apache Beam pipeline (pgn_tf.pipelines.preprocessing says what it does and why).

    python -m pgn_tf.pipelines.preprocess --input 'stories/*.story' --format story \
        --output_dir OUT --vocab_size 50000 [--split train=0.9,validation=0.05,test=0.05 | --split_files url_lists/] \
        [--runner DirectRunner | DaskRunner --dask_client_address HOST:PORT] [other Beam options]
"""

from __future__ import annotations

if __name__ == "__main__":  # the command line: quiet start, then main() (pgn_tf.commands)
    from pgn_tf.commands import run_command

    raise SystemExit(run_command("pgn_tf.pipelines.preprocess"))
import argparse

from pgn_tf.data.articles import PIPELINE_FORMATS
from pgn_tf.pipelines.preprocessing import preprocess_corpus
from pgn_tf.utils import logs
from pgn_tf.utils.errors import run_cli
from pgn_tf.utils.quiet import add_verbose_flag


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pgn_tf.pipelines.preprocess",
                                description=__doc__.splitlines()[0],
                                epilog="Unknown flags are passed to Beam as pipeline options.")
    p.add_argument("--input", required=True, help="file, glob or story dir; tfds: DATA_DIR[:split]; "
                   "parallel: SOURCE[,TARGET]")
    p.add_argument("--format", required=True, choices=PIPELINE_FORMATS)
    p.add_argument("--output_dir", required=True)
    p.add_argument("--vocab_size", type=int, default=50_000, help="with the 4 special tokens")
    p.add_argument("--min_count", type=int, default=1)
    group = p.add_mutually_exclusive_group()
    group.add_argument("--split", default="train=0.9,validation=0.05,test=0.05")
    group.add_argument("--split_files", help="dir with CNN/DM all_train.txt, all_val.txt, "
                       "all_test.txt url lists")
    p.add_argument("--num_shards", type=int, default=0,
                   help="TFRecord files per split (0: one per 128 MiB of the split's input)")
    p.add_argument("--no_lowercase", action="store_true")
    p.add_argument("--replace_digits", action="store_true")
    p.add_argument("--runner", default="DirectRunner",
                   help="a Beam runner: DirectRunner, DaskRunner (with --dask_client_address "
                        "HOST:PORT), DataflowRunner, ...")
    add_verbose_flag(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """Parses the flags (the unknown ones are Beam's), calls preprocess_corpus (its lines shown
    as `[pipelines.preprocess] ...`: the counts, the rate); 2 on an error the user can fix."""
    a, beam_args = build_parser().parse_known_args(argv)

    def preprocess() -> None:
        preprocess_corpus(
            a.input, a.output_dir, fmt=a.format, vocab_size=a.vocab_size,
            min_count=a.min_count, split=a.split, split_files=a.split_files,
            num_shards=a.num_shards, lowercase=not a.no_lowercase,
            replace_digits=a.replace_digits, runner=a.runner, beam_args=beam_args)

    with logs.to_stdout():
        return run_cli("pgn_tf.pipelines.preprocess", preprocess)
