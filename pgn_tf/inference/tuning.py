"""ABS+ feature weights (Rush et al. 2015 section 5) by coordinate ascent on validation ROUGE,
written into the model dir (abs_plus.json), where summarize, evaluate and export find them.

Rush et al. tune alpha with MERT (Z-MERT); this tunes the same five weights with plain
coordinate ascent: alpha_0 (log p) stays 1, and each of the four indicator weights in turn takes
the grid value with the best ROUGE while the others are held, for `rounds` passes. Simpler than
MERT (no n-best lists, no line search), and with four weights and a small grid it decodes the
tuning set only 4 x grid x rounds times, each through the one evaluator (inference.evaluator)
with the weights in the request: a tensor input of the compiled decode, so nothing retraces.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence

from pgn_tf.data import dataset
from pgn_tf.decoding.features import NUM_FEATURES
from pgn_tf.decoding.search import DecodeRequest
from pgn_tf.inference.evaluator import EvalSet, decode_and_score
from pgn_tf.inference.summarizer import Summarizer
from pgn_tf.model_dir import ModelDir
from pgn_tf.utils import progress
from pgn_tf.utils.errors import UserError

log = logging.getLogger("pgn_tf")

GRID = (-1.0, -0.5, 0.0, 0.5, 1.0, 2.0)
METRICS = ("rouge1", "rouge2", "rougeLsum")


@dataclasses.dataclass
class TuneResult:
    """What `tune` found (abs_plus.json holds `as_dict()`): the ROUGE `metric` of plain ABS
    (weights 1,0,0,0,0) and of ABS+ with the tuned `weights` ("1,0.5,0,0,-1", the value of
    decode.abs_plus_weights), over `examples` tuning examples in `decodes` decodes."""

    metric: str
    abs: float
    abs_plus: float
    weights: str
    examples: int
    decodes: int
    method: str = "coordinate ascent"

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def coordinate_ascent(score: Callable[[list[float]], float], grid: Sequence[float],
                      rounds: int) -> tuple[list[float], float, list]:
    """(best weights, their score, every (weights, score) tried) of coordinate ascent from
    [1, 0, 0, 0, 0]: each indicator weight in turn takes its best grid value with the others
    held, for at most `rounds` passes (fewer when a pass changes nothing)."""
    weights = [1.0] + [0.0] * (NUM_FEATURES - 1)
    best = score(weights)
    history = [(list(weights), best)]
    for _ in range(rounds):
        changed = False
        for k in range(1, NUM_FEATURES):
            for value in grid:
                if value == weights[k]:
                    continue
                trial = list(weights)
                trial[k] = value
                s = score(trial)
                history.append((trial, s))
                if s > best:
                    best, weights, changed = s, trial, True
        if not changed:
            break
    return weights, best, history


def tune(model_dir: str, data: str, *, limit: int = 300, skip: int = 0,
         grid: Sequence[float] = GRID, rounds: int = 2, metric: str = "rougeLsum",
         batch_size: int = 64, overrides: Sequence[str] = (),
         show_progress: bool = True) -> TuneResult:
    """Tunes the ABS+ weights of `model_dir`'s model on `data`'s examples skip..skip+limit and
    writes them to <model_dir>/abs_plus.json.

    overrides: decode.* settings to tune under (trigram blocking, fixed length, ...: as
    evaluate's); a decode.abs_plus_weights among them is moot (each decode sets the weights).
    Raises UserError for an unknown metric or no examples."""
    if metric not in METRICS:
        raise UserError(f"unknown metric '{metric}' ({', '.join(METRICS)})")
    summarizer = Summarizer.from_model_dir(model_dir, overrides=list(overrides), where="tune")
    examples = dataset.read_split(data, None, skip + limit)[skip:]
    if not examples:
        raise UserError(f"--data {data} has no examples after --skip {skip}")
    evalset = EvalSet.prepare(examples, summarizer.cfg.data)
    # Decodes at most: the start, then each round tries every grid value of 4 weights.
    most = 1 + rounds * (NUM_FEATURES - 1) * len(grid)
    bar = progress.progbar(most, "decode", None if show_progress else 0)

    def score(weights: list[float]) -> float:
        request = DecodeRequest(feature_weights=tuple(weights))
        result = decode_and_score(summarizer, evalset, request, batch_size=batch_size,
                                  bootstrap=0)
        bar.add(1)
        return result.metrics[metric]

    weights, best, history = coordinate_ascent(score, list(grid), rounds)
    bar.update(len(history), finalize=True)  # fewer when a round changed nothing
    result = TuneResult(metric=metric, abs=history[0][1], abs_plus=best,
                        weights=",".join(f"{w:g}" for w in weights), examples=len(examples),
                        decodes=len(history))
    ModelDir(model_dir).write_abs_plus(result.as_dict())
    log.info("ABS+ weights %s written to %s", result.weights, ModelDir(model_dir).abs_plus_json)
    return result
