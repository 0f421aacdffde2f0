"""Every kept checkpoint of a training run scored on the pairs the quality table scores, beside
what the run's own selection saw at that step: how much a better model-selection rule could
buy, and whether the selection measures follow the score users get.

    python -m research.studies.checkpoint_sweep --model_dir runs/q60seed2/pgn \
        --data DIR/validation.jsonl.gz --work_dir runs/sweep_seed2 [--from_step 7000] [--limit 1500]

Each checkpoint in <model_dir>/ckpt at or after --from_step is decoded with `pgn_tf.evaluate`
(the model dir's decode config: beam 4 and the repeated-word block for debian_pgn) on the first
--limit pairs of --data. The table joins, step by step, the run's eval loss / NLL and its
validation ROUGE on the selection pairs (the TensorBoard eval log) with the scored ROUGE-1,
ROUGE-Lsum and repetition; it ends with what each selection rule would have chosen and that
checkpoint's score, and the best score of any checkpoint (the oracle no rule can beat). Writes
<work_dir>/sweep.md and sweep.json; prints the table and a JSON line. A checkpoint already
scored in work_dir is not decoded again (a killed sweep resumes).
"""

from __future__ import annotations

import argparse
import json
import os
import re

from research.common import emit, event_scalars, read_metrics, sh

EVAL_TAGS = ("loss", "nll", "rouge1", "rougeLsum")


def checkpoints(model_dir: str, from_step: int) -> list[tuple[int, str]]:
    """(step, prefix) of the model dir's checkpoints at or after from_step, by step."""
    ckpt_dir = os.path.join(model_dir, "ckpt")
    if not os.path.isdir(ckpt_dir):
        raise SystemExit(f"no checkpoint directory: {ckpt_dir}")
    found = set()
    for name in os.listdir(ckpt_dir):
        m = re.fullmatch(r"ckpt-(\d+)\.index", name)
        if m and int(m.group(1)) >= from_step:
            found.add(int(m.group(1)))
    return [(s, os.path.join(ckpt_dir, f"ckpt-{s}")) for s in sorted(found)]


def score(prefix: str, step: int, a) -> dict:
    """The scored metrics of one checkpoint (decoded once; read back on a rerun)."""
    out = os.path.join(a.work_dir, f"step-{step}")
    metrics = read_metrics(out)
    if metrics is None:
        sh(["-m", "pgn_tf.evaluate", "--model_dir", a.model_dir, "--checkpoint", prefix,
            "--data", a.data, "--limit", str(a.limit), "--output_dir", out, "--quiet"],
           os.path.join(a.work_dir, "log.txt"))
        metrics = read_metrics(out)
    return metrics


def choose(rows: list[dict], key: str, lowest: bool) -> dict | None:
    have = [r for r in rows if r.get(key) is not None]
    if not have:
        return None
    return (min if lowest else max)(have, key=lambda r: r[key])


def selection_rules(rows: list[dict]) -> dict:
    """{rule: the row it chooses (None where the run logged nothing for it)}: eval loss and NLL
    lowest, validation ROUGE highest, the last checkpoint, and the oracle (best scored
    ROUGE-1). Eval measures of different phases are compared as logged: a coverage phase's loss
    includes its coverage term, so "lowest eval loss" across phases favours the one without."""
    return {"lowest eval loss": choose(rows, "eval_loss", True),
            "lowest eval NLL": choose(rows, "eval_nll", True),
            "best validation ROUGE-Lsum (the presets' rule)": choose(rows, "val_rougeLsum", False),
            "best validation ROUGE-1": choose(rows, "val_rouge1", False),
            "the last checkpoint": rows[-1] if rows else None,
            "best scored ROUGE-1 (oracle)": choose(rows, "rouge1", False)}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model_dir", required=True)
    p.add_argument("--data", required=True, help="the validation JSONL(.gz) the table scores")
    p.add_argument("--work_dir", required=True)
    p.add_argument("--from_step", type=int, default=0)
    p.add_argument("--limit", type=int, default=1500, help="score the first LIMIT pairs")
    a = p.parse_args(argv)
    os.makedirs(a.work_dir, exist_ok=True)
    ckpts = checkpoints(a.model_dir, a.from_step)
    if not ckpts:
        raise SystemExit(f"no checkpoint at or after step {a.from_step} in {a.model_dir}/ckpt")
    ev = event_scalars(os.path.join(a.model_dir, "eval"), EVAL_TAGS)
    at = {tag: {step: value for _, step, value in pts} for tag, pts in ev.items()}
    rows = []
    for i, (step, prefix) in enumerate(ckpts, 1):
        m = score(prefix, step, a)
        rows.append({"step": step,
                     "eval_loss": at["loss"].get(step), "eval_nll": at["nll"].get(step),
                     "val_rouge1": at["rouge1"].get(step), "val_rougeLsum": at["rougeLsum"].get(step),
                     "rouge1": m["rouge1"], "rougeLsum": m["rougeLsum"],
                     "repeat_word_outputs_pct": m["repeat_word_outputs_pct"],
                     "avg_summary_tokens": m["avg_summary_tokens"]})
        print(f"[{i}/{len(ckpts)}] step {step}: ROUGE-1 {m['rouge1']}", flush=True)

    def fmt(v, nd=2):
        return "" if v is None else f"{v:.{nd}f}"

    lines = ["| step | eval loss | eval NLL | validation ROUGE-1 (selection pairs) | "
             "validation ROUGE-Lsum | scored ROUGE-1 | scored ROUGE-Lsum | repeat-word % | words |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['step']:,} | {fmt(r['eval_loss'], 4)} | {fmt(r['eval_nll'], 4)} | "
                     f"{fmt(r['val_rouge1'])} | {fmt(r['val_rougeLsum'])} | {r['rouge1']:.2f} | "
                     f"{r['rougeLsum']:.2f} | {r['repeat_word_outputs_pct']:.2f} | "
                     f"{r['avg_summary_tokens']:.2f} |")
    rules = selection_rules(rows)
    lines += ["", "| rule | step | scored ROUGE-1 | scored ROUGE-Lsum |", "|---|---|---|---|"]
    for rule, r in rules.items():
        if r is not None:
            lines.append(f"| {rule} | {r['step']:,} | {r['rouge1']:.2f} | {r['rougeLsum']:.2f} |")
    table = "\n".join(lines)
    with open(os.path.join(a.work_dir, "sweep.md"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(a.work_dir, "sweep.json"), "w") as f:
        json.dump({"rows": rows, "rules": {k: v and v["step"] for k, v in rules.items()}}, f,
                  indent=1)
    print(table)
    emit("checkpoint_sweep", {"model_dir": a.model_dir, "checkpoints": len(rows),
                              "oracle_step": rules["best scored ROUGE-1 (oracle)"]["step"],
                              "oracle_rouge1": rules["best scored ROUGE-1 (oracle)"]["rouge1"],
                              **{f"{k.split(' (')[0].replace(' ', '_')}_rouge1": v and v["rouge1"]
                                 for k, v in rules.items() if "oracle" not in k}})


if __name__ == "__main__":
    main()
