"""rl_table.md, the converged-start RL study's table (research.studies.rl_converged), rendered
from its rl.json state: the start's flatness, the RL and control grids, the arms' scores, and
the paired tests with their verdicts.

Apart from the study's runner, so the table is rewritten (`--render`) from a state file alone,
with no data, no training and no scoring.
"""

from __future__ import annotations

from research.studies import rl_arms, targets
from research.studies.resumable import cpu_line
from research.studies.rl_arms import ARMS


def selection_beam(preset: str, overrides=()) -> int | str:
    """The beam validation ROUGE decodes with, so the one checkpoint and grid selection read:
    the preset's decode.beam_size under the study's --set (pgn_tf.training.validation decodes
    with the decode config's search; the RL reward's baseline alone is greedy)."""
    from pgn_tf import config as config_lib

    try:
        return config_lib.resolve(preset, list(overrides)).decode.beam_size
    except ValueError:
        return "?"


def render(state: dict, settings: dict, preset: str) -> str:
    """rl_table.md: the start's flatness, the grid, the arms with their tests and targets.
    settings: the study's (rl.json's); preset: the corpus's, whose beam the selection decodes
    with."""
    beam = selection_beam(preset, settings.get("set") or ())
    lines = [f"Paulus et al.'s RL from a converged start ({preset}); start "
             f"{settings.get('start_minutes')} min ML, grid {settings.get('grid_minutes')} min a "
             f"point, arms {settings.get('arm_minutes')} min each, rl_samples "
             f"{settings.get('rl_samples')}; scored on the first {settings.get('score')} "
             f"validation pairs, selected on the {settings.get('select')} after them (beam "
             f"{beam}, as scored); {cpu_line(state)}; code: "
             f"{', '.join(state.get('code_versions') or ['?'])}.",
             ""]
    s = state.get("start")
    if s:
        lines += [f"Start: {s.get('points')} validation points; the last third (from minute "
                  f"{s.get('last_third_from_minute')}) gained {s.get('last_third_gain')} "
                  f"ROUGE-Lsum, slope {s.get('slope_per_10_min')} a 10 min: "
                  + {True: "flat", False: "not flat (not the paper's setting)",
                     None: s.get("reason", "unknown")}[s.get("flat")] + ".", ""]
    if s and s.get("row"):
        r = s["row"]
        lines += [f"ML start, scored: ROUGE-1 {r['rouge1']}, ROUGE-2 {r['rouge2']}, ROUGE-Lsum "
                  f"{r['rougeLsum']} ({r.get('train_steps')} steps).", ""]
    if (state.get("chosen") or {}).get("given"):
        c = state["chosen"]
        lines += [f"No grid: learning rate {c['learning_rate']:g} and gamma {c['gamma']:g} "
                  "given (--point).", ""]
    # a grid point records its final step, which counts the start's: shown is the point's own
    # steps where the start's final step is known, else the final step under that header
    start_step = ((s or {}).get("train") or {}).get("final_step")
    steps_head = "final step" if start_step is None else "steps in the phase"
    offset = start_step or 0
    if state.get("grid"):
        lines += [f"| learning rate | gamma (the RL term's weight) | selection ROUGE-Lsum (beam "
                  f"{beam}) | {steps_head} |", "|---|---|---|---|"]
        lines += [f"| {g['learning_rate']:g} | {g['gamma']:g} | {g['selection_rougeLsum']} | "
                  f"{g['steps'] - offset} |" for g in state["grid"]]
        lines.append("")
    if state.get("control_grid"):
        lines += ["The ML control's grid (ML from the start's best checkpoint, fresh "
                  "optimizer; as many points and minutes as the RL grid):", "",
                  f"| learning rate | selection ROUGE-Lsum (beam {beam}) | {steps_head} |",
                  "|---|---|---|"]
        lines += [f"| {g['learning_rate']:g} | {g['selection_rougeLsum']} | "
                  f"{g['steps'] - offset} |" for g in state["control_grid"]]
        lines.append("")
    if (state.get("control_chosen") or {}).get("given"):
        lines += [f"ML control: learning rate {state['control_chosen']['learning_rate']:g} given "
                  "(--control_point), no control grid.", ""]
    rows = state.get("rows") or {}
    if rows:
        # the digests' rows also measure blocks matched and sentences repeated (digest_table)
        digests = any("block_match_pct" in r for r in rows.values())
        extra_cols = " blocks matched % | sentences repeated % |" if digests else ""
        lines += ["| arm | ROUGE-1 | ROUGE-2 | ROUGE-Lsum | dup 3-gram % | novel 2-gram % | "
                  "outputs repeating a word % |" + extra_cols + " final step | selected step |",
                  "|---|---|---|---|---|---|---|" + "---|---|" * digests + "---|---|"]
        for arm in ARMS:
            r = rows.get(arm)
            if r:
                sel = r.get("selected_step")
                if sel is not None and start_step is not None and sel <= start_step:
                    sel = f"{sel} (the start)"
                lines.append(f"| {arm} | {r['rouge1']} | {r['rouge2']} | {r['rougeLsum']} | "
                             f"{r.get('dup_3gram_pct')} | {r.get('novel_2gram_pct')} | "
                             f"{r.get('repeat_word_outputs_pct')} | "
                             + (f"{r.get('block_match_pct')} | {r.get('repeated_sentence_pct')} | "
                                if digests else "")
                             + f"{r.get('train_steps')} | {sel} |")
        lines.append("")
    tests = state.get("tests") or {}
    against = rl_arms.control_table(tests, targets.P_VALUE)
    if against:
        lines += ["The RL arms against the ML control (the same start checkpoint, a fresh "
                  "optimizer, the same grid budget, minutes and evaluations a minute; the "
                  "objective differs, and the learning rate its own grid chose), each seed; the "
                  "last column is the spread between two seeds' runs of one arm:", "",
                  *against, ""]
    between = {f"{b} vs {a}, {m}" for b, a in rl_arms.BETWEEN_SEEDS for m in rl_arms.METRICS}
    for name, test in tests.items():
        if name in between:  # two runs of one arm: the delta is the spread, not a claim
            lines.append(f"- {name}: delta {test['delta']:+.2f} (95% CI {test['delta_ci95']}): "
                         "the spread between two seeds")
            continue
        ok = test["delta"] > 0 and test["p_value"] < targets.P_VALUE
        verdict = f"above at p < {targets.P_VALUE:g}" if ok else "not shown above"
        lines.append(f"- {name}: delta {test['delta']:+.2f} (95% CI {test['delta_ci95']}), "
                     f"one-sided p = {test['p_value']:.4f}: {verdict}")
    kept = [r["decoded_kept"] for r in [(s or {}).get("row") or {}, *rows.values()]
            if r.get("decoded_kept")]
    if kept:
        lines += ["", f"Decoded outputs kept: {', '.join(kept)}; any p above is recomputed "
                  "by `python -m pgn_tf.significance A B --metric rougeLsum` on two of them."]
    return "\n".join(lines) + "\n"
