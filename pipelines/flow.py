"""The TFX-style flow `python -m pgn_tf.pipelines.run --config pipeline.yaml` runs (`run`):
preprocess -> train -> export -> evaluate -> bless -> push.

Each step is a function `(inputs: dict, out_dir: str) -> outputs: dict` whose artifacts live in
`<run_dir>/<step>/`. A finished step leaves `_COMPLETE.json` (its inputs' fingerprint and its
outputs); running the flow again skips every step whose inputs are unchanged, and a run killed
mid-way continues where it stopped (training resumes from its last checkpoint).

    bless   the new SavedModel must beat the model being served (the highest version under
            push.serving_base, decoded on the same validation examples) or, if none is served,
            the lead-k-words baseline, on bless.metric (ROUGE-Lsum F1) by more than bless.margin.
            A completed bless is not redone when a newer version appears later: a new run_dir
            (or deleting <run_dir>/bless) compares again.
    push    copies the export to <serving_base>/<next version>/: written under a dot-name (which
            TF Serving and serving.server ignore), fsynced, then renamed, so no server loads half
            a model. The copy carries assets.extra/pushed_by.json (the push step's fingerprint):
            a run killed after the rename but before the step completed finds its version on
            the next run instead of pushing a duplicate.

Each step shows its progress (the Beam pipeline's counts, the training bar, the decoding of the
validation examples) unless `--quiet`.

One run at a time per run_dir: `<run_dir>/.lock` (pgn_tf.utils.dirlock) refuses a second one with
the
holder's pid; a killed run's lock is taken over. A step's fingerprint covers its config and,
for preprocess, the input data itself (each input file's path, size and modification time), so
new or changed data is preprocessed again and everything after it re-runs. At start, what a
killed run left half-written is removed: temporary files and dirs under run_dir, and
`.push-*` copies in serving_base whose process is gone.

Config (YAML; `--set section.key=value` overrides a scalar):

    run_dir: runs/pipeline/debian
    preprocess: {input: data/*.jsonl.gz, format: jsonl, vocab_size: 5000,
                 split: "train=0.95,validation=0.05", beam_args: []}
                 # beam_args: the Beam pipeline's flags, e.g. [--runner, DaskRunner,
                 # --dask_client_address, "HOST:PORT", --dask_npartitions, "8"]
    train: {config: see2017_pgn, set: [train.max_steps=2000, ...]}
    evaluate: {limit: 500, batch_size: 64}
    bless: {metric: rougeLsum, margin: 0.0, lead_words: 8}
    push: {serving_base: runs/serving/pgn}
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import logging
import os
import shutil
import time

import yaml

from pgn_tf.pipelines.push import PUSHED_BY, push, served_versions  # noqa: F401 (PUSHED_BY)
from pgn_tf.utils import durable
from pgn_tf.utils.dirlock import DirLock, process_alive
from pgn_tf.utils.errors import UserError

# a command shows it as [pipelines.run] lines (pgn_tf.utils.logs)
log = logging.getLogger("pgn_tf.pipelines.run")

DEFAULTS = {
    "run_dir": "runs/pipeline",
    "preprocess": {"input": None, "format": "jsonl", "vocab_size": 50_000, "min_count": 1,
                   "split": "train=0.95,validation=0.05", "beam_args": []},
    "train": {"config": "see2017_pgn", "set": []},
    "evaluate": {"limit": 500, "batch_size": 64},
    "bless": {"metric": "rougeLsum", "margin": 0.0, "lead_words": 8},
    "push": {"serving_base": None},
}
COMPLETE = "_COMPLETE.json"


# -- config ---------------------------------------------------------------------------------


def load_config(path: str, overrides: list[str] | None = None) -> dict:
    if not os.path.isfile(path):
        raise UserError(f"pipeline config {path} does not exist")
    with open(path) as f:
        given = yaml.safe_load(f) or {}
    if not isinstance(given, dict):
        raise UserError(f"pipeline config {path} must hold a mapping")
    cfg = copy.deepcopy(DEFAULTS)
    for key, value in given.items():
        if key not in cfg:
            raise UserError(f"unknown pipeline config key '{key}' ({', '.join(cfg)})")
        if isinstance(cfg[key], dict):
            unknown = set(value or {}) - set(cfg[key])
            if unknown:
                raise UserError(f"unknown key(s) in '{key}': {', '.join(sorted(unknown))} "
                                f"(known: {', '.join(cfg[key])})")
            cfg[key].update(value or {})
        else:
            cfg[key] = value
    for item in overrides or []:
        dotted, eq, value = item.partition("=")
        section, _, key = dotted.partition(".")
        if not eq or section not in cfg:
            raise UserError(f"--set expects section.key=value, got '{item}'")
        if key:
            if key not in cfg[section]:
                raise UserError(f"unknown pipeline config key '{dotted}'")
            cfg[section][key] = yaml.safe_load(value)
        else:
            cfg[section] = value
    for section, key in (("preprocess", "input"), ("push", "serving_base")):
        if not cfg[section][key]:
            raise UserError(f"pipeline config needs {section}.{key}")
    return cfg


# -- the step runner ----------------------------------------------------------------------


def fingerprint(inputs: dict) -> str:
    return hashlib.sha1(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()


def _changed_keys(old: dict, new: dict) -> list[str]:
    norm = lambda v: json.dumps(v, sort_keys=True, default=str)  # noqa: E731
    return sorted(k for k in set(old) | set(new) if norm(old.get(k)) != norm(new.get(k)))


def run_step(run_dir: str, name: str, fn, inputs: dict, resumable: bool = False) -> dict:
    """Runs fn(inputs, out_dir) unless a completed run with the same inputs is on disk.

    A step whose inputs changed starts again from a clean dir; one that did not complete does
    too, except a resumable one (training), which continues from its last checkpoint. The
    step's files are fsynced before `_COMPLETE.json` says they are there."""
    out_dir = os.path.join(run_dir, name)
    marker = os.path.join(out_dir, COMPLETE)
    fp = fingerprint(inputs)
    if os.path.exists(marker):
        with open(marker) as f:
            done = json.load(f)
        if done["fingerprint"] == fp:
            log.info("%s: done earlier, skipped", name)
            return done["outputs"]
        changed = ", ".join({"after": "an earlier step"}.get(k, k)
                            for k in _changed_keys(done.get("inputs", {}), inputs)) or "inputs"
        log.info("%s: %s changed, running again from scratch", name, changed)
        shutil.rmtree(out_dir)
    elif os.path.isdir(out_dir) and not resumable:
        shutil.rmtree(out_dir)  # a step that did not complete
    os.makedirs(out_dir, exist_ok=True)
    log.info("%s: running", name)
    t0 = time.perf_counter()
    # Downstream steps take this fingerprint as an input, so they re-run when this one did.
    outputs = dict(fn(inputs, out_dir), fingerprint=fp)
    record = {"fingerprint": fp, "inputs": inputs, "outputs": outputs,
              "seconds": round(time.perf_counter() - t0, 2)}
    durable.fsync_tree(out_dir)
    write_marker(marker, record)
    return outputs


def write_marker(path: str, record: dict) -> None:
    """The step's `_COMPLETE.json`: written last, atomically; its presence means done."""
    durable.write_json(path, record, indent=2, default=str)


# -- the steps ------------------------------------------------------------------------------


def split_runner(beam_args: list[str]) -> tuple[str, list[str]]:
    """(the runner, the other Beam flags) of the step's beam_args (`--runner X` or
    `--runner=X`; default DirectRunner): the runner is preprocess_corpus' own argument."""
    runner, rest, i = "DirectRunner", [], 0
    while i < len(beam_args):
        arg = beam_args[i]
        if arg == "--runner" and i + 1 < len(beam_args):
            runner, i = beam_args[i + 1], i + 2
            continue
        if arg.startswith("--runner="):
            runner = arg.split("=", 1)[1]
        else:
            rest.append(arg)
        i += 1
    return runner, rest


def preprocess_step(inputs: dict, out_dir: str) -> dict:
    from pgn_tf.pipelines import preprocessing

    runner, beam_args = split_runner(list(inputs["beam_args"]))
    stats = preprocessing.preprocess_corpus(
        inputs["input"], out_dir, fmt=inputs["format"], vocab_size=inputs["vocab_size"],
        min_count=inputs["min_count"], split=inputs["split"], runner=runner,
        beam_args=beam_args)
    if not stats["kept"].get("validation"):
        raise UserError("preprocessing left no validation examples; check preprocess.split")
    return {"train": os.path.join(out_dir, "train-*.tfrecord"),
            "validation": os.path.join(out_dir, "validation-*.tfrecord"),
            "vocab": os.path.join(out_dir, "vocab.txt"), "stats": stats}


def train_step(inputs: dict, out_dir: str, verbose: int = 1) -> dict:
    from pgn_tf.training.run import train

    overrides = [f"data.vocab_path={inputs['vocab']}",
                 f"data.vocab_size={inputs['vocab_size']}", *inputs["set"]]
    result = train(out_dir, inputs["config"], overrides, train_data=inputs["train"],
                   eval_data=inputs["validation"], progress=bool(verbose))
    return {"model_dir": out_dir, "result": result}


def export_step(inputs: dict, out_dir: str) -> dict:
    from pgn_tf.saved_model import export

    return {"saved_model": export.export(inputs["model_dir"], out_dir, "model", version=1)}


def score_saved_model(path: str, validation: str, limit: int, batch_size: int,
                      verbose: int = 1) -> dict:
    """The one evaluator (pgn_tf.inference.evaluator.evaluate) on an export: the first `limit`
    validation examples decoded with the exact tokens it would serve (its summarize_verbose
    signature) and scored as pgn_tf.evaluate scores them; a progress bar counts the articles."""
    from pgn_tf.inference.evaluator import ExportSource, evaluate

    result = evaluate(ExportSource(path, batch_size), validation, data_format="tfrecord",
                      limit=limit, progress=bool(verbose))
    return {**result.metrics, "system": path}


def lead_metrics(validation: str, limit: int, lead_words: int) -> dict:
    """The lead baseline (the first lead_words words) scored by the one evaluator."""
    from pgn_tf.inference.evaluator import BaselineSource, evaluate

    return evaluate(BaselineSource("lead", lead_words=lead_words), validation,
                    data_format="tfrecord", limit=limit, progress=False).metrics


def evaluate_step(inputs: dict, out_dir: str, verbose: int = 1) -> dict:
    metrics = score_saved_model(inputs["saved_model"], inputs["validation"], inputs["limit"],
                                inputs["batch_size"], verbose)
    with open(os.path.join(out_dir, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
    log.info("candidate: %s", json.dumps(metrics))
    return {"metrics": metrics}


def bless_step(inputs: dict, out_dir: str, verbose: int = 1) -> dict:
    metric, margin = inputs["metric"], float(inputs["margin"])
    candidate = inputs["candidate"][metric]
    versions = served_versions(inputs["serving_base"])
    if versions:
        path = os.path.join(inputs["serving_base"], str(versions[-1]))
        baseline = score_saved_model(path, inputs["validation"], inputs["limit"],
                                     inputs["batch_size"], verbose)
        baseline["version"] = versions[-1]
    else:
        baseline = lead_metrics(inputs["validation"], inputs["limit"], inputs["lead_words"])
    blessed = bool(candidate > baseline[metric] + margin)
    verdict = {"blessed": blessed, "metric": metric, "margin": margin, "candidate": candidate,
               "baseline": baseline["system"], "baseline_value": baseline[metric],
               "baseline_version": baseline.get("version")}
    with open(os.path.join(out_dir, "baseline_metrics.json"), "w") as f:
        json.dump(baseline, f, indent=2)
    log.info("bless: %s", json.dumps(verdict))
    return verdict


def push_step(inputs: dict, out_dir: str) -> dict:
    if not inputs["blessed"]:
        log.info("push: not blessed, nothing pushed")
        return {"pushed": False}
    version, path, already = push(inputs["saved_model"], inputs["serving_base"],
                                  fingerprint(inputs))
    if already:
        log.info("push: version %d -> %s (pushed by an earlier, interrupted run of this step; "
                 "not pushed again)", version, path)
    else:
        log.info("push: version %d -> %s", version, path)
    return {"pushed": True, "version": version, "path": path}


def clean_leftovers(run_dir: str, serving_base: str) -> list[str]:
    """Removes what a killed run left half-written; returns the paths removed.

    Under run_dir (which this process has locked, so every temporary there is a leftover):
    `.tmp-*` / `.push-*` entries and `*.tmp` files. In serving_base, which other pipelines may
    share: `.push-<pid>-<ms>-<host>` copies whose process is gone."""
    removed = []

    def remove(path: str) -> None:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.remove(path)
        removed.append(path)

    shared = os.path.abspath(serving_base)
    for dirpath, dirnames, filenames in os.walk(run_dir):
        if os.path.abspath(dirpath) == shared:
            dirnames.clear()  # a serving_base inside run_dir is shared: handled below
            continue
        for name in list(dirnames):
            if name.startswith((".tmp-", ".push-")):
                remove(os.path.join(dirpath, name))
                dirnames.remove(name)
        for name in filenames:
            if name.startswith((".tmp-", ".push-")) or name.endswith(".tmp"):
                remove(os.path.join(dirpath, name))
    if os.path.isdir(serving_base):
        for name in os.listdir(serving_base):
            if not name.startswith(".push-"):
                continue
            pid, _, rest = name[len(".push-"):].partition("-")
            host = rest.partition("-")[2] or None  # absent in names written before the host was
            if pid.isdecimal() and not process_alive(int(pid), host):
                remove(os.path.join(serving_base, name))
    return removed


def run(cfg: dict, verbose: int | None = None) -> dict:
    """Runs the flow; returns every step's outputs. verbose 0: no progress bars; None: bars
    when standard output is a terminal."""
    from pgn_tf.utils.progress import verbosity

    verbose = verbosity(verbose)
    run_dir = cfg["run_dir"]
    with DirLock(run_dir, what="pipeline run dir"):
        removed = clean_leftovers(run_dir, cfg["push"]["serving_base"])
        if removed:
            log.info("removed %d leftover(s) of an interrupted run: %s", len(removed),
                     ", ".join(removed))
        durable.write_json(os.path.join(run_dir, "pipeline.json"), cfg, indent=2)
        return run_steps(cfg, verbose)


def preprocess_inputs(pre_cfg: dict) -> dict:
    """The preprocess step's inputs: its config and the fingerprint of the data it reads."""
    from pgn_tf.pipelines import readers

    return dict(pre_cfg, data=readers.data_fingerprint(pre_cfg["input"], pre_cfg["format"]))


def train_inputs(train_cfg: dict) -> dict:
    """The train step's config; a config given as a file is fingerprinted by its content."""
    inputs = dict(train_cfg)
    if os.path.isfile(train_cfg["config"]):
        with open(train_cfg["config"], "rb") as f:
            inputs["config_sha1"] = hashlib.sha1(f.read()).hexdigest()
    return inputs


def run_steps(cfg: dict, verbose: int = 1) -> dict:
    """The steps in order. `verbose` is no input of any step: it changes no fingerprint."""
    run_dir = cfg["run_dir"]
    shown = functools.partial  # each step's fn(inputs, out_dir), with the verbosity bound
    pre_cfg, ev_cfg = cfg["preprocess"], cfg["evaluate"]
    out = {"preprocess": run_step(run_dir, "preprocess", preprocess_step,
                                  preprocess_inputs(pre_cfg))}
    data = out["preprocess"]
    out["train"] = run_step(run_dir, "train", shown(train_step, verbose=verbose), {
        "after": data["fingerprint"], "train": data["train"], "validation": data["validation"],
        "vocab": data["vocab"], "vocab_size": pre_cfg["vocab_size"], **train_inputs(cfg["train"]),
    }, resumable=True)
    out["export"] = run_step(run_dir, "export", export_step, {
        "after": out["train"]["fingerprint"], "model_dir": out["train"]["model_dir"]})
    saved_model = out["export"]["saved_model"]
    out["evaluate"] = run_step(run_dir, "evaluate", shown(evaluate_step, verbose=verbose), {
        "after": out["export"]["fingerprint"], "saved_model": saved_model,
        "validation": data["validation"], **ev_cfg})
    out["bless"] = run_step(run_dir, "bless", shown(bless_step, verbose=verbose), {
        "after": out["evaluate"]["fingerprint"], "candidate": out["evaluate"]["metrics"],
        "validation": data["validation"], "serving_base": cfg["push"]["serving_base"],
        **ev_cfg, **cfg["bless"]})
    out["push"] = run_step(run_dir, "push", push_step, {
        "after": out["bless"]["fingerprint"], "saved_model": saved_model,
        "blessed": out["bless"]["blessed"], "serving_base": cfg["push"]["serving_base"]})
    return out
