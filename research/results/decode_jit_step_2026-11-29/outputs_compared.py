"""decode.jit_step against the plain step: every article of DATA (sorted by length, batches of
64, the model dir's decoding), beam 4 and greedy (beam 1); the share of identical summaries and
each side's ROUGE-Lsum. Run under the caps of the CPU in question (ONEDNN_MAX_CPU_ISA=AVX2
MKL_ENABLE_INSTRUCTIONS=AVX2 XLA_FLAGS=--xla_cpu_max_isa=AVX2 for a CPU with AVX2 only).

    python research/results/decode_jit_step_2026-11-29/outputs_compared.py MODEL_DIR DATA
"""
import json
import sys

from rouge_score import rouge_scorer

from pgn_tf.data import dataset
from pgn_tf.decoding.search import DecodeRequest
from pgn_tf.inference.evaluator import decode_split
from pgn_tf.inference.summarizer import Summarizer

M, data = sys.argv[1], sys.argv[2]
ex = dataset.read_split(data, None, None)
ex = sorted(ex, key=lambda e: len(e.article.split()))
out = {}
for jit in (False, True):
    s = Summarizer.from_model_dir(M, "latest", overrides=[f"decode.jit_step={str(jit).lower()}"])
    for beam in (4, 1):
        d = decode_split(s, ex, batch_size=64, request=DecodeRequest(beam_size=beam))
        out[(jit, beam)] = [" ".join(t) for t in d.tokens]
for beam in (4, 1):
    a, b = out[(False, beam)], out[(True, beam)]
    same = sum(x == y for x, y in zip(a, b))
    sc = rouge_scorer.RougeScorer(["rougeLsum"], use_stemmer=True)
    refs = [e.summary if isinstance(e.summary, str) else " ".join(e.summary) for e in ex]
    ra = 100 * sum(sc.score(r, x)["rougeLsum"].fmeasure for r, x in zip(refs, a)) / len(a)
    rb = 100 * sum(sc.score(r, y)["rougeLsum"].fmeasure for r, y in zip(refs, b)) / len(b)
    print(json.dumps({"beam": beam, "articles": len(a), "identical": same,
                      "identical_pct": round(100 * same / len(a), 2),
                      "rougeLsum_plain": round(ra, 3), "rougeLsum_jit": round(rb, 3)}), flush=True)
    for x, y in [(x, y) for x, y in zip(a, b) if x != y][:3]:
        print("  plain:", x, "\n  jit:  ", y)
