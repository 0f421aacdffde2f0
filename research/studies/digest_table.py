"""The quality table on the Debian digests: long articles, multi-sentence summaries, the regime
See et al. and Paulus et al. measured (docs/results/digests.md). Every system trained and scored on
validation by the same script, the peer (OpenNMT-py) given the same hour.

    python -m research.studies.digest_table --data_dir DIGESTS --work_dir WORK \
        [--stages lead,baseline,see,paulus,see_rl,peer] [--minutes 60] [--coverage_minutes M] \
        [--baseline_minutes 40] [--paulus_minutes 60] [--rl_minutes 20] [--score 600] \
        [--peer_dir PEER --peer_work PEER_WORK] [--peer_minutes 60] [--skip_peer] \
        [--figure docs/results/digests_repetition.svg] [--set KEY=VALUE ...]
    python -m research.studies.digest_table --work_dir WORK --render

DIGESTS holds train.jsonl.gz and validation.jsonl.gz. The first --score validation digests are
decoded as `pgn_tf.evaluate` decodes them and scored (ROUGE-1/2/Lsum over sentence lines,
See et al.'s repetition and novelty, the digest measures of pgn_tf.metrics.digests); the
checkpoints are chosen on the ones after them. Each stage adds its rows to
<work_dir>/results.json, so stages can run in separate invocations:

  lead      lead_blocks (the first sentence of each block), lead-3 sentences, and lead-k words
            with k the mean token count of the first 2,000 training summaries.
  baseline  See et al.'s baseline (digest_baseline) for --baseline_minutes.
  see       See et al.'s recipe in --minutes: the pointer-generator (digest_pgn) for --minutes
            minus --coverage_minutes, then coverage (digest_coverage) for --coverage_minutes in
            the same model dir (default: the digest presets' split, 40 + 20 of 60).
  paulus    Paulus et al. (digest_paulus): ML for --paulus_minutes minus --rl_minutes, then from
            that model two arms of --rl_minutes each, ML continued and mixed ML+RL (eq. 16).
  see_rl    the same two arms from the `see` stage's coverage model (See et al. + coverage +
            mixed RL).
  peer      OpenNMT-py copy attention + coverage: PEER/setup_onmt.sh prepares PEER_WORK with
            PEER_CORPUS=digests, then onmt_train runs the yaml bench.sh uses for the digests
            (onmt-ref.yaml with a 50k vocab, batch 16) for --peer_minutes of wall clock,
            start-up included, a checkpoint every --peer_save_every steps; the last checkpoint
            decodes the scored articles with the digest presets' search (beam 4, 20-120
            tokens) and `pgn_tf.evaluate --decoded` scores it like every other row. PEER is the
            directory holding the peer's scripts (never a path named here); PEER_WORK should
            be its own work dir for the digests (setup_onmt.sh rewrites its data/ per corpus).

Each claim (CLAIMS) is a paired bootstrap over the scored digests (pgn_tf.significance,
10,000 resamples, one-sided): ROUGE-Lsum, or a per-digest share (blocks matched, sentences
repeated, duplicate 3-grams). Writes table.md (budgets, the table, the references' rates, the
claims), results.json, the repetition figure (See et al.'s Fig. 4: duplicate n-grams and
sentences per system beside the references) to --figure (default <work_dir>/repetition.svg);
prints the table and one JSON line. `--render` rewrites them from results.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import os

from research.common import emit
from research.studies import digest_peer, quality_report, quality_table, svg_chart, targets
from research.studies.digest_peer import PEER

STAGES = ("lead", "baseline", "see", "paulus", "see_rl", "peer")
LEAD_BLOCKS = "lead_blocks (first sentence of each block)"
BASE = "see2017 baseline"
PGN = "see2017 pointer-generator"
COV = quality_table.COV  # "see2017 pointer-generator + coverage"
PAULUS_ML, PAULUS_RL = "paulus2017, ML continued", "paulus2017, ML+RL (mixed)"
SEE_ML, SEE_RL = "see2017 + coverage, ML continued", "see2017 + coverage, ML+RL (mixed)"
# The peer and See et al.'s baseline are in the table, not the figure: both loop (the peer early
# in training, the baseline short of the words it cannot generate), and their bars would
# flatten every other system's (See et al.'s Fig. 4 leaves its baseline out too).
FIGURE_ROWS = (LEAD_BLOCKS, PGN, COV, PAULUS_ML, PAULUS_RL, SEE_RL)

# (claim, system A, system B, measure, "higher" or "lower": what B is claimed to be than A).
CLAIMS = (
    ("copying: the pointer-generator above See et al.'s baseline", BASE, PGN, "rougeLsum",
     "higher"),
    ("coverage (its phase after the pointer-generator's) raises ROUGE-Lsum", PGN, COV,
     "rougeLsum", "higher"),
    ("coverage lowers the share of duplicate 3-grams", PGN, COV, "dup_3gram", "lower"),
    ("coverage lowers the share of repeated sentences", PGN, COV, "repeated_sentence", "lower"),
    ("coverage covers more blocks", PGN, COV, "block_match", "higher"),
    ("Paulus et al.: mixed ML+RL above ML continued", PAULUS_ML, PAULUS_RL, "rougeLsum",
     "higher"),
    ("See et al. + coverage: mixed ML+RL above ML continued", SEE_ML, SEE_RL, "rougeLsum",
     "higher"),
    ("Paulus et al.'s ML+RL above See et al.'s pointer-generator + coverage", COV, PAULUS_RL,
     "rougeLsum", "higher"),
    ("See et al.'s pointer-generator + coverage above lead_blocks", LEAD_BLOCKS, COV,
     "rougeLsum", "higher"),
    ("See et al.'s pointer-generator + coverage covers more blocks than lead_blocks",
     LEAD_BLOCKS, COV, "block_match", "higher"),
    ("pgn_tf's pointer-generator + coverage above OpenNMT-py's in the same hour", PEER, COV,
     "rougeLsum", "higher"),
    ("pgn_tf's pointer-generator + coverage covers more blocks than OpenNMT-py's", PEER, COV,
     "block_match", "higher"),
)
MEASURES = {"rougeLsum": "ROUGE-Lsum F1", "block_match": "% blocks matched",
            "repeated_sentence": "% sentences repeated", "dup_3gram": "% duplicate 3-grams"}


@dataclasses.dataclass
class DigestSettings(quality_table.TableSettings):
    """The digests' table's settings: the quality table's, the digests' budgets and the peer."""

    score: int = 600
    coverage_minutes: float = 20.0  # of --minutes; the rest the pointer-generator's
    baseline_minutes: float = 40.0
    paulus_minutes: float = 60.0  # the ML phase and one RL arm together
    peer_minutes: float = 60.0
    peer_dir: str | None = None
    peer_work: str | None = None
    peer_save_every: int = 250
    figure: str | None = None  # the repetition figure (default <work_dir>/repetition.svg)


class DigestTable(quality_table.Table):
    """quality_table.Table's running and bookkeeping, the digests' stages, table and claims."""

    a: DigestSettings

    def stage_lead(self) -> None:
        self.evaluate(LEAD_BLOCKS, "lead", None, ["--baseline", "lead_blocks"])
        self.evaluate("lead-3 sentences", "lead", None,
                      ["--baseline", "lead", "--lead_sentences", "3"])
        k = self.lead_words()
        self.evaluate(f"lead-{k} words", "lead", None, ["--baseline", "lead", "--lead_words",
                                                         str(k)])

    def lead_words(self) -> int:
        """The mean token count of the first 2,000 training summaries, rounded."""
        from pgn_tf import config as config_lib
        from pgn_tf.data.dataset import read_split
        from pgn_tf.metrics.scoring import tokenize_texts

        examples = read_split(self.train, None, 2000)
        tokens = tokenize_texts([e.summary.replace("\n", " ") for e in examples],
                                config_lib.DataConfig())
        k = round(sum(len(t) for t in tokens) / len(tokens))
        self.extra["lead_words"] = k
        return k

    def stage_baseline(self) -> None:
        d = self.w("baseline")
        t = self.train_phase(d, "digest_baseline", self.a.baseline_minutes)
        self.evaluate(BASE, "baseline", d, train=[t])

    def stage_see(self) -> None:
        m, c, d = self.a.minutes, self.a.coverage_minutes, self.w("pgn")
        t1 = self.train_phase(d, "digest_pgn", m - c)
        self.evaluate(PGN, "see", d, train=[t1])
        t2 = self.train_phase(d, "digest_coverage", c)
        self.evaluate(COV, "see", d, train=[t1, t2])

    def stage_paulus(self) -> None:
        d = self.w("paulus")
        t = self.train_phase(d, "digest_paulus", self.a.paulus_minutes - self.a.rl_minutes)
        self.evaluate("paulus2017 ML", "paulus", d, train=[t])
        self.arms("paulus", d, "digest_paulus", "paulus2017", self.a.rl_minutes, [t])

    def stage_see_rl(self) -> None:
        cov = self.row(COV)
        if not cov:
            raise SystemExit("the see_rl stage starts from the see stage's model: run --stages "
                             "see first (with the same --work_dir)")
        t = {"wall_seconds": 60 * cov["train_minutes"], "final_step": cov["train_steps"]}
        self.arms("see_rl", self.w("pgn"), "digest_coverage", "see2017 + coverage",
                  self.a.rl_minutes, [t])

    def stage_peer(self) -> None:
        pred, train = digest_peer.train_and_translate(self.a, self.log)
        self.evaluate(PEER, "peer", None, ["--decoded", pred], train=[train])

    # -- output --------------------------------------------------------------------------------

    def budgets(self) -> dict[str, str]:
        """Each row's training budget in minutes, from the settings of its run."""
        s = self.settings()
        if not s:
            return {}
        m, rl, pm = s["minutes"], s["rl_minutes"], s["paulus_minutes"]
        c = s.get("coverage_minutes", quality_table.COVERAGE_SHARE * m)  # runs before the flag
        see = f"{m - c:g} + {c:g}"
        return {BASE: f"{s['baseline_minutes']:g}", PGN: f"{m - c:g}", COV: see,
                "paulus2017 ML": f"{pm - rl:g}", PAULUS_ML: f"{pm - rl:g} + {rl:g}",
                PAULUS_RL: f"{pm - rl:g} + {rl:g}", SEE_ML: f"{see} + {rl:g}",
                SEE_RL: f"{see} + {rl:g}", PEER: f"{s['peer_minutes']:g} (wall clock)"}

    def table(self) -> str:
        cols = ["system", "budget (min)", "trained (min)", "steps", "ROUGE-1", "ROUGE-2",
                "ROUGE-Lsum", "dup 1/2/3/4-gram %", "dup sentence %", "novel 2-gram %",
                "blocks matched % (F1 >= 0.3 / 0.5 / 0.7)", "sentences repeated %",
                "blocks revisited %", "sentences", "tokens"]
        lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        budgets = self.budgets()
        ci = quality_report.ci_cell

        def get(r, key):
            return r.get(key, "")

        order = {s: i for i, s in enumerate(STAGES)}
        for r in sorted(self.rows, key=lambda r: order.get(r.get("stage"), 99)):
            cells = [r["name"], budgets.get(r["name"], ""), get(r, "train_minutes"),
                     get(r, "train_steps"), ci(r, "rouge1"), ci(r, "rouge2"), ci(r, "rougeLsum"),
                     " / ".join(str(get(r, f"dup_{n}gram_pct")) for n in (1, 2, 3, 4)),
                     get(r, "dup_sentence_pct"), get(r, "novel_2gram_pct"),
                     " / ".join(str(get(r, k)) for k in ("block_match_pct_at_0.3",
                                                          "block_match_pct",
                                                          "block_match_pct_at_0.7")),
                     get(r, "repeated_sentence_pct"), get(r, "block_revisit_pct"),
                     get(r, "sentences_per_summary"), get(r, "avg_summary_tokens")]
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
        ref = self.references()
        if ref:
            lines.append(
                f"\nReferences: duplicate 1/2/3/4-grams {ref['dup']}%, duplicate sentences "
                f"{ref['dup_sentence']}%, novel 2-grams {ref['novel_2gram']}%, sentences "
                f"repeated {ref.get('repeated_sentence', '')}%, blocks revisited "
                f"{ref.get('block_revisit', '')}%, {ref.get('sentences', '')} sentences a "
                f"summary.")
        return "\n".join(lines)

    def references(self) -> dict:
        """The references' rates (every row carries them; read from the first that does)."""
        r = next((x for x in self.rows if "reference_dup_1gram_pct" in x), None)
        if r is None:
            return {}
        return {"dup": " / ".join(str(r[f"reference_dup_{n}gram_pct"]) for n in (1, 2, 3, 4)),
                "dup_ngrams": [r[f"reference_dup_{n}gram_pct"] for n in (1, 2, 3, 4)],
                "dup_sentence": r["reference_dup_sentence_pct"],
                "novel_2gram": r["reference_novel_2gram_pct"],
                "repeated_sentence": r.get("reference_repeated_sentence_pct"),
                "block_revisit": r.get("reference_block_revisit_pct"),
                "sentences": r.get("reference_sentences_per_summary")}

    def per_example(self, name: str, measure: str):
        """float64 [n]: a row's per-digest values of a CLAIMS measure, from its decoded.jsonl."""
        import numpy as np

        from pgn_tf.metrics import digests as digest_metrics
        from pgn_tf.metrics import scoring, significance

        rows = significance.read_decoded(self.row(name)["decoded"])
        if measure == "rougeLsum":
            return significance.per_example_rouge(rows, "rougeLsum"), rows
        if measure == "dup_3gram":
            def dup(tokens):
                grams = scoring.ngrams(tokens, 3)
                return 100 * (len(grams) - len(set(grams))) / len(grams) if grams else 0.0
            return np.array([dup(r["decoded"].split()) for r in rows]), rows
        if any("blocks" not in r for r in rows):
            raise ValueError(f"{name}'s decoded.jsonl has no digest counts: re-run its stage")
        return digest_metrics.per_example_shares(rows)[measure], rows

    def claims(self) -> list[dict]:
        """CLAIMS whose two rows are present, each with its paired bootstrap."""
        from pgn_tf.metrics import significance

        out = []
        for claim, a, b, measure, direction in CLAIMS:
            if not (self.row(a) and self.row(b)):
                continue
            (va, ra), (vb, rb) = self.per_example(a, measure), self.per_example(b, measure)
            if [r["reference"] for r in ra] != [r["reference"] for r in rb]:
                raise SystemExit(f"{a} and {b} were not scored on the same digests")
            # one-sided: is B above A ("higher"), or A above B ("lower": B below A)?
            test = (significance.paired_bootstrap(va, vb) if direction == "higher"
                    else significance.paired_bootstrap(vb, va))
            out.append({**test, "claim": claim, "a": a, "b": b, "measure": measure,
                        "direction": direction, "mean_a": round(float(va.mean()), 2),
                        "mean_b": round(float(vb.mean()), 2), "holds": test["p_value"] < targets.P_VALUE})
        return out

    @staticmethod
    def claim_line(c: dict) -> str:
        lo, hi = c["delta_ci95"]
        sign = "B - A" if c["direction"] == "higher" else "A - B"
        verdict = "holds" if c["holds"] else "not shown"
        return (f"{c['claim']} ({MEASURES[c['measure']]}: {c['b']} {c['mean_b']} vs {c['a']} "
                f"{c['mean_a']}; {sign} {c['delta']:+.2f} [{lo:.2f}, {hi:.2f}], one-sided "
                f"paired bootstrap p = {c['p_value']:.4f}): {verdict}")

    def figure(self) -> str:
        """See et al.'s Fig. 4 on the digests: % duplicate n-grams and sentences per system."""
        series = {}
        for name in FIGURE_ROWS:
            r = self.row(name)
            if r:
                series[name] = [r[f"dup_{n}gram_pct"] for n in (1, 2, 3, 4)] + [
                    r["dup_sentence_pct"]]
        ref = self.references()
        if ref:
            series["references"] = ref["dup_ngrams"] + [ref["dup_sentence"]]
        # each group on its own scale: duplicate words, far commoner than duplicate 3-grams,
        # would otherwise flatten the 3-gram bars
        return svg_chart.grouped_bars(["1-grams", "2-grams", "3-grams", "4-grams", "sentences"],
                                      series, "Duplicates within a summary (See et al. Fig. 4), "
                                      "Debian digests; each group on its own scale",
                                      "% duplicates", shared_axis=False)

    def write(self) -> None:
        s = self.settings()
        claims = self.claims()
        peer = f"the peer {s.get('peer_minutes')}" if self.row(PEER) else "the peer not run"
        head = (f"Debian digests, the first {s.get('score')} validation digests (beam 4, 20-120 "
                f"tokens); budgets in minutes of this machine: See et al.'s recipe "
                f"{s.get('minutes')}, baseline {s.get('baseline_minutes')}, Paulus et al. "
                f"{s.get('paulus_minutes')} (RL arms {s.get('rl_minutes')} each), {peer}; "
                f"CPU flags: {s.get('cpu_flags')}.\n\n")
        text = head + self.table() + "\n\n" + "\n".join(
            f"- {self.claim_line(c)}" for c in claims) + "\n"
        with open(self.w("table.md"), "w") as f:
            f.write(text)
        figure = self.a.figure or self.w("repetition.svg")
        if any(self.row(n) for n in FIGURE_ROWS):
            os.makedirs(os.path.dirname(os.path.abspath(figure)), exist_ok=True)
            with open(figure, "w") as f:
                f.write(self.figure())
        self.extra["claims"] = claims
        self.save()
        print(text)
        emit("digest_table", {"settings": s, "rows": {
            r["name"]: [r["rouge1"], r["rouge2"], r["rougeLsum"], r.get("block_match_pct")]
            for r in self.rows}, "claims": [[c["claim"], c["delta"], c["p_value"]]
                                            for c in claims]})


def preset_minutes(name: str) -> float:
    """A preset's training budget in minutes (the digest presets' are set by the runs
    docs/results/digests.md names)."""
    from pgn_tf import config as config_lib

    return float(config_lib.resolve(name).train.max_minutes)


def preset_coverage_share() -> float:
    """The share of See et al.'s budget the digest presets give the coverage phase:
    digest_coverage's minutes over digest_pgn's and digest_coverage's."""
    pgn, cov = preset_minutes("digest_pgn"), preset_minutes("digest_coverage")
    return cov / (pgn + cov)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m research.studies.digest_table",
                                description=__doc__.splitlines()[0])
    p.add_argument("--data_dir", help="holds the digests' train.jsonl.gz and validation.jsonl.gz")
    p.add_argument("--work_dir", default="runs/digests")
    p.add_argument("--stages", default=",".join(STAGES), help=f"some of {', '.join(STAGES)}")
    p.add_argument("--minutes", type=float, default=60.0, help="See et al.'s recipe's budget")
    p.add_argument("--coverage_minutes", type=float,
                   help="the coverage phase's part of --minutes, the rest the pointer-"
                        "generator's (default: the digest presets' split, digest_coverage's "
                        "budget over digest_pgn's and its)")
    p.add_argument("--baseline_minutes", type=float,
                   help="See et al.'s baseline's budget (default digest_baseline's: the "
                        "pointer-generator phase's)")
    p.add_argument("--paulus_minutes", type=float, default=60.0,
                   help="Paulus et al.'s budget, ML phase and one RL arm together")
    p.add_argument("--rl_minutes", type=float, default=20.0, help="each RL-stage arm's budget")
    p.add_argument("--peer_minutes", type=float, default=60.0,
                   help="the peer's wall clock, start-up included")
    p.add_argument("--peer_dir", help="the directory holding the peer's setup_onmt.sh, bench.sh "
                                      "and onmt-ref.yaml")
    p.add_argument("--peer_work", help="the peer's work dir for the digests (venv, data, model)")
    p.add_argument("--peer_save_every", type=int, default=250,
                   help="the peer's checkpoint interval in steps (its last checkpoint is scored)")
    p.add_argument("--skip_peer", action="store_true", help="leave the peer stage out")
    p.add_argument("--score", type=int, default=600, help="validation digests scored")
    p.add_argument("--figure", help="where the repetition figure goes (an .svg path; default "
                                    "<work_dir>/repetition.svg)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override for every training phase of every stage")
    p.add_argument("--render", action="store_true",
                   help="only rewrite table.md and the figure from results.json")
    return p


def main(argv: list[str] | None = None) -> None:
    p = build_parser()
    a = p.parse_args(argv)
    stages = [s for s in a.stages.split(",") if s and not (a.skip_peer and s == "peer")]
    unknown = set(stages) - set(STAGES)
    if unknown:
        p.error(f"unknown stage(s) {sorted(unknown)} (stages: {', '.join(STAGES)})")
    if not a.render and not a.data_dir:
        p.error("--data_dir is required unless --render")
    if "peer" in stages and not a.render and not (a.peer_dir and a.peer_work):
        p.error("the peer stage needs --peer_dir and --peer_work (or --skip_peer)")
    if a.coverage_minutes is None:
        a.coverage_minutes = preset_coverage_share() * a.minutes
    if a.baseline_minutes is None:
        a.baseline_minutes = preset_minutes("digest_baseline")
    if not 0 < a.coverage_minutes < a.minutes:
        p.error(f"--coverage_minutes must lie between 0 and --minutes ({a.minutes:g})")
    settings = DigestSettings(
        work_dir=a.work_dir, data_dir=a.data_dir, score=a.score, overrides=a.set,
        minutes=a.minutes, rl_minutes=a.rl_minutes, coverage_minutes=a.coverage_minutes,
        baseline_minutes=a.baseline_minutes, paulus_minutes=a.paulus_minutes,
        peer_minutes=a.peer_minutes, peer_dir=a.peer_dir, peer_work=a.peer_work,
        peer_save_every=a.peer_save_every, figure=a.figure)
    quality_table.run(DigestTable(settings), stages, a.render, minutes=a.minutes,
                      coverage_minutes=a.coverage_minutes, baseline_minutes=a.baseline_minutes,
                      paulus_minutes=a.paulus_minutes,
                      rl_minutes=a.rl_minutes, peer_minutes=a.peer_minutes, score=a.score,
                      overrides=a.set)


if __name__ == "__main__":
    main()
