"""The quality table on the Debian package-description corpus: every model trained and scored
on validation with the same script, end to end.

    python -m research.studies.quality_table --data_dir DIR --work_dir runs/quality \
        [--stages lead,baseline,see,seeds,paulus,see_rl,abs,decode] [--minutes 60] [--score 1500]
        [--set model.dropout=0.3 ...]
    python -m research.studies.quality_table --work_dir runs/quality --render
    python -m research.studies.digest_table ...   # the digests' table (its own flags)

DIR holds train.jsonl.gz and validation.jsonl.gz (pipelines.debian_descriptions). The first
--score validation pairs are decoded as `pgn_tf.evaluate` decodes them and scored (rouge-score
F1, stemmed, bootstrap 95% intervals). Each stage adds its rows to <work_dir>/results.json, so
stages can run in separate invocations (a stage run again replaces its rows):

  lead    lead-6/8/10 words.
  baseline  See et al.'s baseline (--minutes).
  see     See et al.: the pointer-generator (3/4 of --minutes), then
          coverage in the same model dir (1/4); every checkpoint of that run is kept, so beside
          its ROUGE-chosen best it also scores the checkpoint chosen by eval loss and the
          average of the last 5 (pgn_tf.average_checkpoints); the learning curves (eval loss and
          validation ROUGE against minutes) go to curves.md.
  seeds   the same pointer-generator + coverage recipe at --seed_minutes, seeds 1 and 2: their
          spread says which differences are noise.
  precision  the same recipe at --seed_minutes, seed 1, twice: float32 with batches bucketed by
          article length (the presets' settings), and bfloat16 mixed
          precision with batches bucketed by summary length too (the speed switches); a paired
          bootstrap on ROUGE-Lsum says whether the switches cost quality under the same budget.
  cpu_types  See et al.'s recipe at --minutes (the see stage's phases, seed 1), twice: as `auto`
          picks on this CPU, and as a CPU without bf16 runs it (float32 forced, oneDNN and MKL
          capped at AVX2, the phases and the scoring in that environment); steps and ROUGE side
          by side, and a paired bootstrap on ROUGE-Lsum.
  paulus  Paulus et al.: ML for --minutes minus --rl_minutes, then from that model two arms of
          --rl_minutes each, ML continued and the mixed ML+RL objective (eq. 16), compared with
          a paired bootstrap on ROUGE-L (pgn_tf.significance).
  see_rl  the same two arms from the `see` stage's coverage model (See et al.'s model trained
          with Paulus et al.'s objective).
  abs     Rush et al.: ABS with each encoder (--abs_minutes each, the same budget), ABS+ with
          feature weights tuned on --tune validation pairs after the scored ones.
  decode  decoding choices on the `see` stage's coverage model, each against the same model
          without it: raw output ([UNK] not replaced), avoid_unk, trigram blocking, the GNMT
          coverage penalty; and the repeated-word block on and off (one of the two is the
          model's own default: on in debian_pgn).

Writes table.md (the table, the papers' claims and the issues' targets checked), results.json,
report.md (10 examples side by side with an attention heatmap), curves.md; prints the table
and a JSON line. `--render` rewrites them from results.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import time

from research.common import cpu_flags, emit, event_scalars, read_metrics, sh
from research.studies import quality_report
from research.studies.quality_report import (
    CONV_NORM_ROW,
    COV,
    CPU_TYPE_ARMS,
    PRECISION_ARMS,
    STAGES,
)

# See et al.'s recipe in one budget: the pointer-generator, then coverage for this share of it
COVERAGE_SHARE = 0.25
DECODE_VARIANTS = (  # (row suffix, decode overrides): each changes one thing
    ("raw output, [UNK] kept", ["decode.replace_unk=false"]),
    ("avoid_unk", ["decode.replace_unk=false", "decode.avoid_unk=true"]),
    ("trigram blocking", ["decode.block_trigrams=true"]),
    ("coverage penalty 0.2", ["decode.coverage_penalty=0.2"]),
    # both ways: the block is debian_pgn's default, and off in model dirs trained before it was
    ("repeated-word block on", ["decode.block_repeated_words=true"]),
    ("repeated-word block off", ["decode.block_repeated_words=false"]),
)


def set_flags(overrides) -> list[str]:
    """["--set", KEY=VALUE, ...] for a pgn_tf command, from KEY=VALUE overrides."""
    return [x for o in overrides for x in ("--set", o)]


@dataclasses.dataclass
class TableSettings:
    """What a table runs with: its command's flags (main builds it from them) or a study's."""

    work_dir: str
    data_dir: str | None = None  # holds train.jsonl.gz and validation.jsonl.gz
    score: int = 1500  # the first validation pairs, scored; checkpoints are chosen after them
    overrides: list[str] = dataclasses.field(default_factory=list)  # KEY=VALUE, every phase
    minutes: float = 60.0  # one See et al. or Paulus et al. model
    seed_minutes: float = 20.0
    rl_minutes: float = 20.0  # each RL arm
    abs_minutes: float = 20.0  # each ABS encoder
    tune: int = 500  # pairs after the scored ones that tune ABS+


class Table:
    def __init__(self, a: TableSettings):
        self.a = a
        self.train = os.path.join(a.data_dir or "", "train.jsonl.gz")
        self.valid = os.path.join(a.data_dir or "", "validation.jsonl.gz")
        os.makedirs(a.work_dir, exist_ok=True)
        self.results = os.path.join(a.work_dir, "results.json")
        self.rows: list[dict] = []
        if os.path.exists(self.results):
            with open(self.results) as f:
                self.rows = json.load(f)
        self.log = os.path.join(a.work_dir, "log.txt")
        self.attention_png = os.path.join(a.work_dir, "attention.png")
        self.extra: dict = {}
        extra = os.path.join(a.work_dir, "extra.json")
        if os.path.exists(extra):
            with open(extra) as f:
                self.extra = json.load(f)

    def w(self, *parts) -> str:
        return os.path.join(self.a.work_dir, *parts)

    # -- running ------------------------------------------------------------------------------

    def train_phase(self, model_dir: str, preset: str, minutes: float, extra=(),
                    env: dict | None = None) -> dict:
        # `python -m pgn_tf.train` in a process a phase: research.common.sh says why
        t0 = time.perf_counter()
        sh(["-m", "pgn_tf.train", "--config", preset, "--train_data", self.train,
            "--eval_data", self.valid, "--model_dir", model_dir, "--quiet",
            "--set", f"train.max_minutes={minutes}",
            # checkpoints are chosen (eval loss, validation ROUGE) on pairs after the scored ones
            "--set", f"train.eval_skip={self.a.score}",
            *set_flags(self.a.overrides), *extra], self.log, env)
        with open(os.path.join(model_dir, "train_result.json")) as f:
            result = json.load(f)
        result["phase_seconds"] = round(time.perf_counter() - t0, 1)
        return result

    def evaluate(self, name: str, stage: str, model_dir: str | None, extra=(), train=None,
                 env: dict | None = None, **info) -> dict:
        # pgn_tf.evaluate in a process of its own, as each phase: research.common.sh says why
        out = self.w("eval", name.replace(" ", "_").replace("/", "-"))
        shutil.rmtree(out, ignore_errors=True)
        args = ["-m", "pgn_tf.evaluate", "--data", self.valid, "--limit", str(self.a.score),
                "--output_dir", out, "--quiet", *extra]
        if model_dir:
            args += ["--model_dir", model_dir]
        sh(args, self.log, env)
        m = read_metrics(out)
        row = {"name": name, "stage": stage, **m, **info,
               "decoded": os.path.join(out, "decoded.jsonl")}
        if train:
            row["train_minutes"] = round(sum(t["wall_seconds"] for t in train) / 60, 1)
            row["train_steps"] = train[-1]["final_step"]
            row["precision"] = train[-1].get("precision")
        self.rows = [r for r in self.rows if r["name"] != name] + [row]
        self.save()
        print(f"[quality_table] {name}: R1 {m['rouge1']} R2 {m['rouge2']} RLsum {m['rougeLsum']}",
              flush=True)
        return row

    def save(self) -> None:
        with open(self.results, "w") as f:
            json.dump(self.rows, f, indent=2)
        with open(self.w("extra.json"), "w") as f:
            json.dump(self.extra, f, indent=2)

    def stage_lead(self) -> None:
        for k in (6, 8, 10):
            self.evaluate(f"lead-{k} words", "lead", None,
                          ["--baseline", "lead", "--lead_words", str(k)])

    def stage_baseline(self) -> None:
        d = self.w("baseline")
        t = self.train_phase(d, "debian_baseline", self.a.minutes)
        self.evaluate("see2017 baseline", "see", d, train=[t])

    def stage_see(self) -> None:
        m = self.a.minutes
        d = self.w("pgn")
        keep = ["--set", "train.keep_checkpoints=1000"]  # every checkpoint, for the study
        t1 = self.train_phase(d, "debian_pgn", (1 - COVERAGE_SHARE) * m, keep)
        self.evaluate("see2017 pointer-generator", "see", d, train=[t1])
        phase_start = t1["final_step"]
        t2 = self.train_phase(d, "debian_coverage", COVERAGE_SHARE * m, keep)
        self.evaluate(COV, "see", d, train=[t1, t2])
        self.selection_study(d, phase_start, [t1, t2])
        self.extra["curves"] = self.curves(d)
        from pgn_tf.data.dataset import read_split

        first = read_split(self.valid, None, 1)[0].article
        for picture in (self.attention_png, self.attention_png[: -len(".png")] + ".html"):
            sh(["-m", "pgn_tf.summarize", "--model_dir", d, "--explain", picture, first], self.log)

    def selection_study(self, d: str, phase_start: int, train: list) -> None:
        """The same run's coverage-phase checkpoint with the lowest eval loss, and the average
        of its last 5 checkpoints, beside the ROUGE-chosen best (issue: model selection)."""
        ev = event_scalars(os.path.join(d, "eval"), ("loss",))["loss"]
        phase = [(step, value) for _, step, value in ev if step > phase_start]
        step = min(phase, key=lambda sv: sv[1])[0]
        self.evaluate(COV + " (best eval loss)", "see", d,
                      ["--checkpoint", os.path.join(d, "ckpt", f"ckpt-{step}")], train=train,
                      checkpoint_step=step)
        avg = self.w("pgn_avg5")
        shutil.rmtree(avg, ignore_errors=True)
        from pgn_tf.training.averaging import average_checkpoints

        average_checkpoints(d, 5, avg)
        self.evaluate(COV + " (average of last 5)", "see", avg, train=train)

    def curves(self, d: str) -> list:
        """(minutes into the run, step, eval loss, validation ROUGE-1/Lsum) at each eval."""
        ev = event_scalars(os.path.join(d, "eval"), ("loss", "rouge1", "rougeLsum"))
        if not ev["loss"]:
            return []
        t0 = ev["loss"][0][0]
        by_step: dict = {}
        for tag, points in ev.items():
            for wall, step, value in points:
                by_step.setdefault(step, {"minutes": round((wall - t0) / 60, 1), "step": step})
                by_step[step][tag] = round(value, 4 if tag == "loss" else 2)
        return [by_step[s] for s in sorted(by_step)]

    def short_recipe(self, d: str, minutes: float, overrides: list,
                     env: dict | None = None) -> list:
        """See et al.'s two phases in d, 3/4 and 1/4 of minutes, with the KEY=VALUE overrides
        (and env, variables set for the phases only); the phases' results."""
        extra = set_flags(overrides)
        return [self.train_phase(d, "debian_pgn", (1 - COVERAGE_SHARE) * minutes, extra, env),
                self.train_phase(d, "debian_coverage", COVERAGE_SHARE * minutes, extra, env)]

    def stage_seeds(self) -> None:
        m = self.a.seed_minutes
        for seed in (1, 2):
            d = self.w(f"seed{seed}")
            shutil.rmtree(d, ignore_errors=True)
            train = self.short_recipe(d, m, [f"train.seed={seed}"])
            self.evaluate(f"{COV}, {m:g} min, seed {seed}", "seeds", d, train=train)

    def stage_precision(self) -> None:
        m, out = self.a.seed_minutes, {}
        for arm, overrides in PRECISION_ARMS:
            d = self.w("precision_" + arm.split(",")[0])
            shutil.rmtree(d, ignore_errors=True)
            out[arm] = self.evaluate(f"{COV}, {m:g} min, {arm}", "precision", d,
                                     train=self.short_recipe(d, m, ["train.seed=1", *overrides]))
        from pgn_tf.metrics import significance

        (a, _), (b, _) = PRECISION_ARMS
        test = significance.compare(out[a]["decoded"], out[b]["decoded"], "rougeLsum")
        self.extra["precision_test"] = dict(test, cpu_flags=cpu_flags())
        self.save()
        print(f"[quality_table] {b} vs {a} on ROUGE-Lsum: {test}", flush=True)

    def stage_cpu_types(self) -> None:
        m, out = self.a.minutes, {}
        for i, (arm, overrides, env) in enumerate(CPU_TYPE_ARMS):
            d = self.w(f"cpu_type{i}")
            shutil.rmtree(d, ignore_errors=True)
            train = self.short_recipe(d, m, ["train.seed=1", *overrides], env)
            out[arm] = self.evaluate(f"{COV}, {m:g} min, {arm}", "cpu_types", d, train=train,
                                     env=env)
        from pgn_tf.metrics import significance

        (a, _, _), (b, _, _) = CPU_TYPE_ARMS
        test = significance.compare(out[b]["decoded"], out[a]["decoded"], "rougeLsum")
        self.extra["cpu_types_test"] = dict(test, cpu_flags=cpu_flags())
        self.save()
        print(f"[quality_table] {a} vs {b} on ROUGE-Lsum: {test}", flush=True)

    def arms(self, stage: str, start_dir: str, preset: str, label: str, minutes: float,
             ml_train: list) -> None:
        """Two arms from the same model: the ML objective continued, and the mixed one."""
        out = {}
        arms = (("ML continued", []),
                ("ML+RL (mixed)", ["--set", "train.objective=mixed", "--set",
                                   "train.eval_every=100"]))
        dirs = [arm.split()[0].replace("+", "_") for arm, _ in arms]
        for (arm, extra), name in zip(arms, dirs):
            d = self.w(stage, name)
            shutil.rmtree(d, ignore_errors=True)
            # the paulus stage's arms live inside its model dir: an arm never copies another
            shutil.copytree(start_dir, d, ignore=shutil.ignore_patterns("eval_*", *dirs))
            t = self.train_phase(d, preset, minutes, extra)
            out[arm] = self.evaluate(f"{label}, {arm}", stage, d, train=[*ml_train, t])
        from pgn_tf.metrics import significance

        test = significance.compare(out["ML continued"]["decoded"], out["ML+RL (mixed)"]["decoded"],
                                    "rougeLsum")
        self.extra[f"{stage}_rl_test"] = test
        self.save()
        print(f"[quality_table] {label}: mixed vs ML continued on ROUGE-Lsum: {test}", flush=True)

    def stage_paulus(self) -> None:
        d = self.w("paulus")
        t = self.train_phase(d, "debian_paulus", self.a.minutes - self.a.rl_minutes)
        self.evaluate("paulus2017 ML", "paulus", d, train=[t])
        self.arms("paulus", d, "debian_paulus", "paulus2017", self.a.rl_minutes, [t])

    def stage_see_rl(self) -> None:
        # The arms' training minutes count the whole `see` run (both phases), which the model
        # dir's train_result.json (its last phase alone) does not hold: its row does.
        cov = [r for r in self.rows if r["name"] == COV]
        if not cov:
            raise SystemExit("the see_rl stage starts from the see stage's model: run --stages "
                             "see first (with the same --work_dir)")
        t = {"wall_seconds": 60 * cov[0]["train_minutes"], "final_step": cov[0]["train_steps"]}
        self.arms("see_rl", self.w("pgn"), "debian_coverage", "see2017 + coverage",
                  self.a.rl_minutes, [t])

    def stage_abs(self) -> None:
        for enc in ("bow", "conv", "attention"):
            d = self.w(f"abs_{enc}")
            t = self.train_phase(d, "debian_abs", self.a.abs_minutes,
                                 ["--set", f"model.abs_encoder={enc}"])
            name = CONV_NORM_ROW if enc == "conv" else f"rush2015 ABS ({enc} encoder)"
            # plain ABS: not the ABS+ weights a tune wrote into the model dir (a rerun)
            self.evaluate(name, "abs", d, ["--set", "decode.abs_plus_weights="], train=[t])
        d = self.w("abs_attention")
        sh(["-m", "pgn_tf.tune", "--model_dir", d, "--data", self.valid,
            "--skip", str(self.a.score), "--limit", str(self.a.tune)], self.log)
        with open(os.path.join(d, "abs_plus.json")) as f:
            weights = json.load(f)["weights"]
        self.evaluate("rush2015 ABS+ (attention)", "abs", d,
                      ["--set", f"decode.abs_plus_weights={weights}"], train=[t],
                      abs_plus_weights=weights)

    def stage_decode(self) -> None:
        d = self.w("pgn")
        for suffix, overrides in DECODE_VARIANTS:
            self.evaluate(f"{COV}, {suffix}", "decode", d, set_flags(overrides))

    # -- output ---------------------------------------------------------------------------------

    def row(self, name: str) -> dict | None:
        return next((r for r in self.rows if r["name"] == name), None)

    def table(self) -> str:
        return quality_report.table_md(self)

    def claims(self) -> list[str]:
        """The papers' claims and the issues' targets, checked on the rows present."""
        return quality_report.claims(self)

    def settings(self) -> dict:
        path = self.w("settings.json")
        if os.path.exists(path):
            with open(path) as f:
                return json.load(f)
        return {}

    def curves_md(self) -> str:
        return quality_report.curves_md(self)

    def report(self) -> str:
        """10 validation examples side by side."""
        return quality_report.report(self)

    def write(self) -> None:
        table, claims = self.table(), self.claims()
        settings = self.settings()
        head = (f"Training budgets: --minutes {settings.get('minutes')}, seeds "
                f"{settings.get('seed_minutes')}, RL arms {settings.get('rl_minutes')}, ABS "
                f"{settings.get('abs_minutes')} a model; first {settings.get('score')} validation "
                f"pairs; CPU flags: {settings.get('cpu_flags')}.\n\n")
        with open(self.w("table.md"), "w") as f:
            f.write(head + table + "\n\n" + "\n".join(f"- {c}" for c in claims) + "\n")
        with open(self.w("curves.md"), "w") as f:
            f.write(self.curves_md() + "\n")
        if self.a.data_dir and any(self.row(n) for n in ("see2017 baseline", COV)):
            with open(self.w("report.md"), "w") as f:
                f.write(self.report())
        self.save()
        print(head + table)
        print("\n".join(claims))
        emit("quality_table", {"settings": settings,
                               "rows": {r["name"]: [r["rouge1"], r["rouge2"], r["rougeLsum"]]
                                        for r in self.rows},
                               **{k: v for k, v in self.extra.items() if k.endswith("_test")}})


def main(argv: list[str] | None = None) -> None:
    # --corpus digests: the Debian digests' table, its own stages and flags (digest_table.py)
    corpus = argparse.ArgumentParser(add_help=False)
    corpus.add_argument("--corpus", choices=("descriptions", "digests"), default="descriptions")
    known, rest = corpus.parse_known_args(argv)
    if known.corpus == "digests":  # its own module, which builds on this one (no import back)
        raise SystemExit("the digests' table is its own command: python -m "
                         "research.studies.digest_table " + " ".join(rest))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", choices=("descriptions", "digests"), default="descriptions",
                   help="descriptions (this table) or digests (research/studies/digest_table.py's, "
                        "with its own flags: --corpus digests --help)")
    p.add_argument("--data_dir", help="holds train.jsonl.gz and validation.jsonl.gz")
    p.add_argument("--work_dir", default="runs/quality")
    p.add_argument("--stages", default=",".join(STAGES), help=f"some of {', '.join(STAGES)}")
    p.add_argument("--minutes", type=float, default=60.0,
                   help="training budget of one See et al. or Paulus et al. model")
    p.add_argument("--seed_minutes", type=float, default=20.0, help="the seeds stage's budget")
    p.add_argument("--rl_minutes", type=float, default=20.0, help="each RL-stage arm's budget")
    p.add_argument("--abs_minutes", type=float, default=20.0, help="each ABS encoder's budget")
    p.add_argument("--score", type=int, default=1500, help="validation examples scored")
    p.add_argument("--tune", type=int, default=500, help="examples after them tune ABS+")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override for every training phase of every stage "
                        "(e.g. model.dropout=0.3); repeatable, recorded in settings.json")
    p.add_argument("--render", action="store_true",
                   help="only rewrite table.md, curves.md and report.md from results.json")
    a = p.parse_args(rest)
    stages = [s for s in a.stages.split(",") if s]
    unknown = set(stages) - set(STAGES)
    if unknown:
        p.error(f"unknown stage(s) {sorted(unknown)} (stages: {', '.join(STAGES)})")
    if not a.render and not a.data_dir:
        p.error("--data_dir is required unless --render")
    settings = TableSettings(work_dir=a.work_dir, data_dir=a.data_dir, score=a.score,
                             overrides=a.set, minutes=a.minutes, seed_minutes=a.seed_minutes,
                             rl_minutes=a.rl_minutes, abs_minutes=a.abs_minutes, tune=a.tune)
    run(Table(settings), stages, a.render, minutes=a.minutes, seed_minutes=a.seed_minutes,
        rl_minutes=a.rl_minutes, abs_minutes=a.abs_minutes, score=a.score, overrides=a.set)


def run(table: Table, stages: list[str], render: bool, **settings) -> None:
    """Runs the stages (unless only rendering), with the run's settings written first, then
    writes the table."""
    if not render:
        recorded = table.settings()
        recorded.update(settings, cpu_flags=cpu_flags())
        with open(table.w("settings.json"), "w") as f:
            json.dump(recorded, f)
        for stage in stages:
            getattr(table, f"stage_{stage}")()
    table.write()


if __name__ == "__main__":
    main()
