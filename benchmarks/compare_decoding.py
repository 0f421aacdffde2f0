"""This project's decoding half of benchmarks/compare_peer.py: the decoding model (trained as
the peer's, kept and reused), and the timed decoding of the validation articles in a child
process of its own (`python -m benchmarks.compare_decoding JOB_JSON`, so that its peak RSS is
decoding's alone), the default decoding interleaved with any --decode_variant's. compare_peer's
docstring says what is timed and how."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from benchmarks.peer import BATCH, BEAM, tail
from pgn_tf import config as config_lib
from pgn_tf.data import dataset
from pgn_tf.decoding.search import DecodeRequest
from pgn_tf.inference.evaluator import decode_split
from pgn_tf.inference.summarizer import Summarizer
from pgn_tf.model_dir import ModelDir
from pgn_tf.utils import procfs
from pgn_tf.utils.child_process import run_python
from pgn_tf.utils.errors import UserError, run_cli


def check_decode_model(cfg_name: str, cfg: config_lib.Config, model_dir: str,
                       steps: int) -> str | None:
    """The kept decoding model's checkpoint at `steps`, or None when it has to be trained (or
    continued) to it; UserError when the kept model is of another configuration or longer
    trained."""
    mdir = ModelDir(model_dir)
    if mdir.has_config():
        kept = mdir.read_config()
        if (kept.model, kept.data) != (cfg.model, cfg.data):
            raise UserError(f"{model_dir} holds a model of another configuration than "
                            f"--config {cfg_name} with these --set values; give another "
                            f"--work_dir or delete it")
    latest = mdir.latest_checkpoint()
    done = int(latest.rsplit("-", 1)[1]) if latest else 0
    if done > steps:
        raise UserError(f"{model_dir} holds a model trained {done} steps, more than "
                        f"--decode_train_steps {steps}; give another --work_dir or delete it")
    return latest if done == steps else None


def decode_model(cfg_name: str, overrides: list[str], cfg: config_lib.Config, train_data: str,
                 model_dir: str, steps: int) -> str:
    """<model_dir> trained `steps` steps (no validation, as the peer trains), reused when its
    latest checkpoint is at that step, continued when it is before; returns that checkpoint."""
    kept = check_decode_model(cfg_name, cfg, model_dir, steps)
    if kept:
        print(f"== pgn_tf decoding model: reusing {kept}", flush=True)
        return kept
    log = os.path.join(os.path.dirname(os.path.abspath(model_dir)), "decode_model_train.log")
    print(f"== pgn_tf decoding model: training {steps} steps in {model_dir} (log: {log})",
          flush=True)
    sets = [*overrides, f"train.max_steps={steps}", "train.max_minutes=0"]
    try:
        run_python(["-m", "pgn_tf.train", "--config", cfg_name, "--train_data", train_data,
                    "--model_dir", model_dir, "--quiet", *sum((["--set", s] for s in sets), [])],
                   log)
    except RuntimeError as e:
        raise UserError(str(e)) from None
    return ModelDir(model_dir).latest_checkpoint()


def our_decoding(cfg: config_lib.Config, model_dir: str, checkpoint: str, data: str,
                 max_tokens: int, min_tokens: int | None = None,
                 tokens_out: str | None = None) -> dict:
    """Beam-BEAM decoding of every article of `data` in batches of BATCH, at most max_tokens
    tokens (at least min_tokens: the preset's minimum when None), by `checkpoint` of
    model_dir; the decode section otherwise from cfg (the module docstring says what is
    timed). tokens_out: a JSON file to write the summaries' tokens to, in the data's order."""
    examples = dataset.read_split(data, None, None)
    loaded = Summarizer.from_model_dir(model_dir, checkpoint)
    # the preset's decode section (its constraints, penalties); beam and lengths per request
    decode_cfg = dataclasses.replace(cfg.decode, batch_size=BATCH)
    summarizer = Summarizer(loaded.model, loaded.vocab,
                            dataclasses.replace(loaded.cfg, decode=decode_cfg).validate())
    min_steps = min(cfg.decode.min_dec_steps if min_tokens is None else min_tokens, max_tokens)
    request = DecodeRequest(beam_size=BEAM, max_steps=max_tokens, min_steps=min_steps)
    print(f"== pgn_tf decoding: {len(examples)} articles, beam {BEAM}, batch {BATCH}, "
          f"{min_steps}-{max_tokens} tokens", flush=True)
    # The warm-up batch traces the same compiled call (same request, batch BATCH) as the timed.
    warmup = decode_split(summarizer, examples[:BATCH], batch_size=BATCH, request=request).seconds
    cpu0 = time.process_time()
    out = decode_split(summarizer, examples, batch_size=BATCH, request=request)
    tokens, seconds = out.tokens, out.seconds
    cpu = time.process_time() - cpu0
    if tokens_out:
        with open(tokens_out, "w") as f:
            json.dump(tokens, f)
    return {
        "articles": len(examples), "seconds": round(seconds, 2),
        "articles_per_sec": round(len(examples) / seconds, 2),
        "cpu_ms_per_article": round(1000 * cpu / len(examples), 2),
        "mean_tokens": round(sum(len(t) for t in tokens) / len(tokens), 2),
        "warmup_seconds": round(warmup, 2), "min_dec_steps": min_steps,
        "max_tokens": max_tokens, "peak_rss_mib": procfs.peak_mib(),
    }


# The line a decoding child prints its figures on (decoding_in_child).
CHILD_RESULT = "compare_peer decoding result: "
DEFAULT_ARM = "default"  # the name of the decoding under --config and --set alone


def decoding_in_child(job: dict) -> dict:
    """our_decoding in a fresh process (`python -m benchmarks.compare_decoding JSON`, from the
    repository's root), so that its peak RSS is decoding's alone; job: config, set, model_dir,
    checkpoint, data, max_tokens, min_tokens (None: the preset's), optionally tokens_out."""
    print("== pgn_tf decoding, in a child process (its own peak RSS)", flush=True)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-m", "benchmarks.compare_decoding", json.dumps(job)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=root,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    found = [line for line in proc.stdout.splitlines() if line.startswith(CHILD_RESULT)]
    if proc.returncode or not found:
        raise UserError(f"the decoding child failed (status {proc.returncode}); the last lines "
                        f"of its output:\n{tail(proc.stdout)}")
    return json.loads(found[-1][len(CHILD_RESULT):])


def interleaved_decoding(job: dict, variants: list[tuple[str, list[str]]], rounds: int,
                         decode: Callable[[dict], dict] = decoding_in_child) -> dict:
    """The default decoding (`job`, as decoding_in_child takes it) and each variant's (its
    decode.* overrides added to job["set"]), each round every arm in turn, each run in a
    child of its own (`decode`), so that a noisy minute falls on every arm alike and each
    arm's peak RSS is its own. Each arm's figures are its median round's (by time), with every
    round's articles/s and its largest peak RSS; a variant's also the share of articles whose
    summary is the default's, token for token. Returns the default's figures, the variants'
    under "variants" when there are any."""
    arms = [(DEFAULT_ARM, []), *variants]
    runs = {name: [] for name, _ in arms}
    with tempfile.TemporaryDirectory(prefix="compare_decoding-") as tmp:
        for r in range(rounds):
            for name, overrides in arms:
                print(f"== round {r + 1} of {rounds}: {name} {' '.join(overrides)}".rstrip(),
                      flush=True)
                out = os.path.join(tmp, f"{name}-{r}.json")
                res = decode({**job, "set": [*job["set"], *overrides], "tokens_out": out})
                with open(out) as f:
                    res["tokens"] = json.load(f)
                runs[name].append(res)
                print(f"   {res['articles_per_sec']} articles/s", flush=True)
    figures = {}
    for name, done in runs.items():
        # by rate, not by the rounded seconds: a tie there would pick a round at random
        fig = dict(sorted(done, key=lambda x: -x["articles_per_sec"])[(len(done) - 1) // 2])
        fig["rounds_articles_per_sec"] = [x["articles_per_sec"] for x in done]
        fig["peak_rss_mib"] = max(x["peak_rss_mib"] or 0 for x in done) or None
        figures[name] = fig
    default_tokens = figures[DEFAULT_ARM]["tokens"]
    for name, _ in variants:
        same = sum(a == b for a, b in zip(figures[name]["tokens"], default_tokens, strict=True))
        figures[name]["identical_to_default_pct"] = round(100 * same / len(default_tokens), 2)
    for fig in figures.values():
        del fig["tokens"]
    result = figures.pop(DEFAULT_ARM)
    if variants:
        result["variants"] = figures
    return result


def run_decoding_job(text: str) -> dict:
    """The child's side of decoding_in_child: decodes, prints its figures on one line."""
    job = json.loads(text)
    cfg = config_lib.resolve(job["config"], job["set"])
    result = our_decoding(cfg, job["model_dir"], job["checkpoint"], job["data"],
                          job["max_tokens"], job.get("min_tokens"), job.get("tokens_out"))
    print(CHILD_RESULT + json.dumps(result), flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m benchmarks.compare_decoding JOB_JSON (compare_peer's child)",
              file=sys.stderr)
        return 2
    return run_cli("compare_decoding", run_decoding_job, argv[0])


if __name__ == "__main__":
    sys.exit(main())
