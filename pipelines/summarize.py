"""`python -m pgn_tf.pipelines.summarize`: summarize a corpus with an exported SavedModel on Apache
Beam's RunInference, for corpora that need more than one machine (pgn_tf.pipelines.summarizing
says what the pipeline does and why).

    python -m pgn_tf.pipelines.summarize --saved_model BASE/NAME/VERSION \
        --input 'articles-*.jsonl.gz' --output OUT/summaries [--format jsonl|text] \
        [--runner DirectRunner | DaskRunner --dask_client_address HOST:PORT] [Beam options]
"""

from __future__ import annotations

if __name__ == "__main__":  # the command line: quiet start, then main() (pgn_tf.commands)
    from pgn_tf.commands import run_command

    raise SystemExit(run_command("pgn_tf.pipelines.summarize"))
import argparse

from pgn_tf.pipelines.summarizing import summarize_files
from pgn_tf.utils import logs
from pgn_tf.utils.errors import run_cli
from pgn_tf.utils.quiet import add_verbose_flag


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pgn_tf.pipelines.summarize",
                                description=__doc__.splitlines()[0],
                                epilog="Unknown flags are passed to Beam as pipeline options.")
    p.add_argument("--saved_model", required=True, help="an exported version dir")
    p.add_argument("--input", required=True, help="a file pattern (Beam file systems)")
    p.add_argument("--output", required=True, help="output prefix: PREFIX-SSSSS-of-NNNNN.jsonl")
    p.add_argument("--format", choices=("text", "jsonl"),
                   help="the input's format (default: JSONL for .jsonl/.json(.gz) names, else "
                        "plain text)")
    p.add_argument("--field", default="article", help="JSONL field holding the article")
    p.add_argument("--output_field", default="summary", help="field the summary goes to")
    p.add_argument("--batch_size", type=int,
                   help="articles per model call (default: the export's decode.batch_size)")
    p.add_argument("--num_shards", type=int, default=0,
                   help="output files (0: one per 128 MiB of input)")
    p.add_argument("--runner", default="DirectRunner",
                   help="a Beam runner: DirectRunner, DaskRunner (with --dask_client_address "
                        "HOST:PORT), DataflowRunner, ...")
    add_verbose_flag(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """Parses the flags (the unknown ones are Beam's), calls summarize_files (its counts shown
    as `[pipelines.summarize] ...`); 2 on an error the user can fix."""
    a, beam_args = build_parser().parse_known_args(argv)

    def summarize() -> None:
        summarize_files(a.saved_model, a.input, a.output, fmt=a.format, field=a.field,
                        output_field=a.output_field, batch_size=a.batch_size,
                        num_shards=a.num_shards, runner=a.runner, beam_args=beam_args)

    with logs.to_stdout():
        return run_cli("pgn_tf.pipelines.summarize", summarize)
