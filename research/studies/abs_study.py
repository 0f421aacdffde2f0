"""Rush et al.'s ABS+ against lead-8 on the Debian package descriptions: each encoder with the
corpus preset and with the paper's, the same training budget each, in one resumable run.

    python -m research.studies.abs_study --data_dir DIR --work_dir runs/abs_study [--minutes 60] \
        [--models debian_abs:conv,debian_abs:attention,...] [--stop_after debian_abs:conv]
    python -m research.studies.abs_study --work_dir runs/abs_study --render

Rush et al.'s claim (their DUC-2004 table): ABS+ (ABS rescored with five extractive features,
section 5) above the extractive baselines (PREFIX 22.43 ROUGE-1 against ABS+ 28.18). Each
model of --models, PRESET:ENCODER, in MODELS' order (the corpus preset's first: they are the
ones users get):

  train   PRESET with model.abs_encoder=ENCODER for --minutes; checkpoints selected as the
          preset selects them, on validation pairs after the scored ones.
          debian_abs: the corpus preset ([UNK] replaced from the attention encoder's attention;
          the bag-of-words and convolutional encoders attend to no word, so they avoid [UNK],
          Config.avoids_unk). rush2015_abs: the paper's settings (SGD, H = 400, fixed length 8,
          [UNK] kept), with only the run's bookkeeping (PAPER_BOOKKEEPING) added.
  tune    ABS+'s feature weights by pgn_tf.tune on the --select pairs after the scored ones.
  score   ABS and ABS+ as the quality table scores (research/studies/quality_table.py): the first
          --score validation pairs, the preset's beam; lead-8 words on the same pairs. Both
          ABS presets set data.replace_digits, so these rows and their lead-8 are scored
          against references with every digit as '#' (lead_name), unlike other models' rows.
  test    ABS+ against lead-8, one-sided paired bootstrap (pgn_tf.significance) on ROUGE-1
          (the paper's measure) and ROUGE-Lsum. The target (research/studies/targets.py): above at
          p < P_VALUE with fewer than ABS_PLUS_MAX_UNK_PCT % of its outputs holding [UNK].
          The [UNK] half cannot fail under debian_abs (decode.replace_unk: the bag-of-words
          and convolutional searches never emit [UNK], and the attention model's [UNK]s are
          replaced by an article word after the search); it tests only rush2015_abs, which
          keeps [UNK].

Tuning and scoring decode as the preset decodes now (decode_overrides), not as it did when
the model was trained. A model whose phase finished is not trained again, nor tuned and scored
again unless its preset's decoding changed since, so a run stopped midway resumes where it
stopped; --stop_after MODEL ends a run cleanly after that model. Writes
<work_dir>/abs_table.md, abs.json and a JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from pgn_tf import config as config_lib
from research.common import emit, sh
from research.studies import targets
from research.studies.quality_report import ci_cell
from research.studies.quality_table import Table, TableSettings, set_flags
from research.studies.resumable import StudyState, cpu_line, run_and_write, selected_step

ENCODERS = ("bow", "conv", "attention")
PRESETS = ("debian_abs", "rush2015_abs")
# Every model, in the order a run trains them: the corpus preset's (what users get) first, the
# strongest encoders first.
MODELS = tuple(f"{p}:{e}" for p in PRESETS for e in ("conv", "attention", "bow"))
# The paper's preset on this corpus: what it must have to run here for an hour and be evaluated
# as the corpus presets are (the step cap, evaluation and checkpoint cadence of _debian), none
# of which is a modelling or decoding choice.
PAPER_BOOKKEEPING = ("train.max_steps=1000000", "train.eval_every=500",
                     "train.checkpoint_every=500", "train.eval_batches=50")
LEAD = "lead-8 words"
METRICS = ("rouge1", "rougeLsum")


def lead_name(preset: str) -> str:
    """The lead-8 row a preset's models are tested against: its text normalisation's."""
    data = config_lib.resolve(preset).data
    return LEAD + (" (digits as #)" if data.replace_digits else "") + (
        "" if data.lowercase else " (cased)")


def digit_presets() -> list[str]:
    """The presets of PRESETS whose references are scored with every digit as '#'."""
    return [p for p in PRESETS if config_lib.resolve(p).data.replace_digits]


def parse_models(text: str) -> list[str]:
    """--models: PRESET:ENCODER items of MODELS, comma-separated, run in the order given."""
    models = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODELS]
    if unknown or not models:
        raise argparse.ArgumentTypeError(
            f"unknown model(s) {unknown} (PRESET:ENCODER, of {', '.join(MODELS)})")
    return models


def train_overrides(model: str) -> list[str]:
    """A model's config overrides: its encoder, and the paper's preset's bookkeeping."""
    preset, encoder = model.split(":")
    extra = list(PAPER_BOOKKEEPING) if preset == "rush2015_abs" else []
    return [f"model.abs_encoder={encoder}", *extra]


def decode_overrides(preset: str, overrides=()) -> list[str]:
    """The preset's decoding as it is now, with the study's --set `overrides` (ABS+'s weights
    aside, which tuning finds), as decode.KEY=VALUE overrides: a model dir holds the decoding
    of when it was trained, and a preset's decoding may change after (as debian_abs took the
    repetition blocks) without touching its training, so the study tunes and scores under the
    preset's current decoding."""
    decode = dataclasses.asdict(config_lib.resolve(preset, list(overrides)).decode)
    return [f"decode.{k}={v}" for k, v in decode.items() if k != "abs_plus_weights"]


def verdict(test: dict, unk_pct: float | None) -> dict:
    """Whether ABS+ meets the target on one metric: above lead-8 at p < P_VALUE (one-sided),
    and fewer than ABS_PLUS_MAX_UNK_PCT % of its outputs holding [UNK] (after decode.replace_unk,
    which under debian_abs leaves none: that half fails only where [UNK] is kept)."""
    above = test["delta"] > 0 and test["p_value"] < targets.P_VALUE
    unk_ok = unk_pct is not None and unk_pct < targets.ABS_PLUS_MAX_UNK_PCT
    return {"above_lead": above, "unk_ok": unk_ok, "met": above and unk_ok}


class Study:
    def __init__(self, a):
        self.a = a
        self.table = Table(TableSettings(work_dir=a.work_dir, data_dir=a.data_dir,
                                         score=a.score, overrides=a.set))
        self.run_state = StudyState(self.table, "abs.json", a.stop_after, "abs_study")
        self.state = self.run_state.state

    def run(self) -> None:
        a, st = self.a, self.run_state
        models = self.state.setdefault("models", {})
        for model in a.models:
            preset = model.split(":")[0]
            lead = self.lead(preset)
            d = self.table.w(model.replace(":", "_"))
            t = st.phase(d, preset, a.minutes, set_flags(train_overrides(model)))
            m = models.get(model) if d in st.reused else None
            scored = m is not None and "tests" in m
            decode = decode_overrides(preset, a.set)
            # scored before under the preset's current decoding: reused
            if not (scored and m.get("decode") == decode):
                if scored:
                    print(f"[abs_study] {model}: {preset}'s decoding changed since it was "
                          "scored: tuned and scored again", flush=True)
                m = self.score(model, d, t, lead, decode)
                models[model] = m
            # the checkpoint scored: where the preset's selection stopped improving
            m["selected_step"] = selected_step(d)
            st.save()
            if st.stop_after(model):
                return

    def lead(self, preset: str) -> dict:
        """Lead-8 words, its text normalised as the preset's data (the paper's replaces
        digits by #): the references the preset's models are scored against."""
        name = lead_name(preset)
        rows = self.state.setdefault("rows", {})
        if name not in rows:
            data = config_lib.resolve(preset).data
            rows[name] = self.table.evaluate(
                name, "abs_study", None,
                ["--baseline", "lead", "--lead_words", "8", *set_flags(
                    [f"data.lowercase={data.lowercase}",
                     f"data.replace_digits={data.replace_digits}"])])
            self.run_state.save()
        return rows[name]

    def score(self, model: str, d: str, t: dict, lead: dict, decode: list[str]) -> dict:
        """ABS and ABS+ (tuned on the selection pairs) scored, ABS+ against lead-8, all under
        `decode` (decode_overrides). The model dir's own config holds its encoder."""
        preset, encoder = model.split(":")
        m = {"preset": preset, "encoder": encoder, "train": t, "decode": decode}
        flags = set_flags(decode)
        # plain ABS: not the ABS+ weights a tune wrote into the model dir (a rerun)
        m["abs"] = self.table.evaluate(f"{model} ABS", "abs_study", d,
                                       [*flags, "--set", "decode.abs_plus_weights="], train=[t])
        sh(["-m", "pgn_tf.tune", "--model_dir", d, "--data", self.table.valid,
            "--skip", str(self.a.score), "--limit", str(self.a.select), "--quiet", *flags],
           self.table.log)
        with open(os.path.join(d, "abs_plus.json")) as f:
            m["tuning"] = json.load(f)
        weights = m["tuning"]["weights"]
        m["abs_plus"] = self.table.evaluate(
            f"{model} ABS+", "abs_study", d,
            [*flags, "--set", f"decode.abs_plus_weights={weights}"],
            train=[t], abs_plus_weights=weights)
        m["lead"] = lead["name"]
        m["tests"] = compare_to_lead(lead["decoded"], m["abs_plus"]["decoded"])
        return m

    def render(self) -> str:
        return render(self.state)


def compare_to_lead(lead_decoded: str, decoded: str) -> dict:
    from pgn_tf.metrics import significance

    return {metric: significance.compare(lead_decoded, decoded, metric) for metric in METRICS}


def render(state: dict) -> str:
    """abs_table.md: lead-8, each model's ABS and ABS+ rows, and ABS+ against lead-8."""
    settings = state.get("settings") or {}
    code = ", ".join(state.get("code_versions") or ["?"])
    lines = [f"Rush et al.'s ABS+ against lead-8 on the Debian descriptions: "
             f"{settings.get('minutes')} min of training a model; scored on the first "
             f"{settings.get('score')} validation pairs, ABS+ tuned on the "
             f"{settings.get('select')} after them; references (and lead-8) with every digit "
             f"as '#' for {', '.join(digit_presets()) or 'no preset'} (data.replace_digits); "
             f"{cpu_line(state)}; code: {code}.", "",
             "| system | ROUGE-1 | ROUGE-2 | ROUGE-Lsum | [UNK] outputs % | raw [UNK] outputs % "
             "| repeat-word outputs % | novel 2-gram % | steps | selected step | train min |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]

    def row(name: str, r: dict, selected: int | None = None) -> str:
        return (f"| {name} | {ci_cell(r, 'rouge1')} | {ci_cell(r, 'rouge2')} | "
                f"{ci_cell(r, 'rougeLsum')} | "
                f"{r.get('unk_outputs_pct', '')} | {r.get('raw_unk_outputs_pct', '')} | "
                f"{r.get('repeat_word_outputs_pct', '')} | {r.get('novel_2gram_pct', '')} | "
                f"{r.get('train_steps', '')} | {'' if selected is None else selected} | "
                f"{r.get('train_minutes', '')} |")

    for name, r in sorted((state.get("rows") or {}).items()):  # the lead rows
        lines.append(row(name, r))
    models = state.get("models") or {}
    for model in MODELS:
        m = models.get(model)
        if m:
            lines.append(row(f"{model} ABS", m["abs"], m.get("selected_step")))
            lines.append(row(f"{model} ABS+ ({m['abs_plus'].get('abs_plus_weights')})",
                             m["abs_plus"], m.get("selected_step")))
    lines.append("")
    for model in MODELS:
        m = models.get(model)
        if not m:
            continue
        unk = m["abs_plus"].get("unk_outputs_pct")
        for metric, test in m["tests"].items():
            v = verdict(test, unk)
            what = ("met" if v["met"] else "missed: " + ", ".join(
                x for x, ok in ((f"not above lead-8 at p < {targets.P_VALUE:g}",
                                 v["above_lead"]),
                                (f"[UNK] in {unk}% of outputs (>= "
                                 f"{targets.ABS_PLUS_MAX_UNK_PCT:g}%)", v["unk_ok"])) if not ok))
            lines.append(f"- {model} ABS+ vs {m.get('lead', LEAD)}, {metric}: delta "
                         f"{test['delta']:+.2f} (95% CI {test['delta_ci95']}), "
                         f"one-sided p = {test['p_value']:.4f}; target {what}")
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m research.studies.abs_study",
                                description=__doc__.splitlines()[0])
    p.add_argument("--data_dir", help="holds train.jsonl.gz and validation.jsonl.gz")
    p.add_argument("--work_dir", default="runs/abs_study")
    p.add_argument("--minutes", type=float, default=60.0, help="each model's training budget")
    p.add_argument("--models", type=parse_models, default=list(MODELS),
                   metavar="PRESET:ENCODER,...", help=f"some of {', '.join(MODELS)}")
    p.add_argument("--score", type=int, default=1500, help="validation pairs scored")
    p.add_argument("--select", type=int, default=500,
                   help="validation pairs after the scored ones that tune ABS+")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override for every training phase (recorded)")
    p.add_argument("--stop_after", choices=MODELS, metavar="PRESET:ENCODER",
                   help="end the run after this model (resume later without it)")
    p.add_argument("--allow_cpu_change", action="store_true",
                   help="resume on a machine whose CPU flags differ from the study's first run "
                        "(refused otherwise: its phases are timed); the table names each "
                        "phase's flags")
    p.add_argument("--render", action="store_true", help="only rewrite abs_table.md")
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    if not a.render and not a.data_dir:
        raise SystemExit("--data_dir is required unless --render")
    study = Study(a)
    run_and_write(a, study, "abs_table.md", study.render)
    emit("abs_study", {"settings": study.state.get("settings"),
                       "code_versions": study.state.get("code_versions"),
                       "models": {k: {"abs_plus": [v["abs_plus"][x] for x in
                                                   ("rouge1", "rouge2", "rougeLsum")],
                                      "unk_outputs_pct": v["abs_plus"].get("unk_outputs_pct"),
                                      "tests": v["tests"]}
                                  for k, v in (study.state.get("models") or {}).items()}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
