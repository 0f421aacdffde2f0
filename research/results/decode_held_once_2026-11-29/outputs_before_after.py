"""The encoder's outputs held once an article (the change) against tiled to the beams (the
checkout before it): every article of DATA, sorted by length, in batches of 64, the model
dir's decoding, beam 4 and greedy. `decode` writes one checkout's summaries (run it with that
checkout first on PYTHONPATH); `compare` gives the share of identical summaries and each
side's ROUGE-Lsum. Run under the caps of the CPU in question (ONEDNN_MAX_CPU_ISA=AVX2
MKL_ENABLE_INSTRUCTIONS=AVX2 for a CPU with AVX2 only).

    PYTHONPATH=BEFORE python outputs_before_after.py decode MODEL_DIR DATA before.json
    PYTHONPATH=AFTER python outputs_before_after.py decode MODEL_DIR DATA after.json
    python outputs_before_after.py compare DATA before.json after.json
"""
import json
import sys

from rouge_score import rouge_scorer

from pgn_tf.data import dataset


def articles(data: str) -> list:
    return sorted(dataset.read_split(data, None, None), key=lambda e: len(e.article.split()))


def decode(model_dir: str, data: str, out: str) -> None:
    import pgn_tf
    from pgn_tf.decoding.search import DecodeRequest
    from pgn_tf.inference.evaluator import decode_split
    from pgn_tf.inference.summarizer import Summarizer

    print("pgn_tf from", pgn_tf.__file__, flush=True)
    ex = articles(data)
    summarizer = Summarizer.from_model_dir(model_dir, "latest")
    result = {}
    for beam in (4, 1):
        d = decode_split(summarizer, ex, batch_size=64, request=DecodeRequest(beam_size=beam))
        result[str(beam)] = [" ".join(t) for t in d.tokens]
    with open(out, "w") as f:
        json.dump(result, f)


def compare(data: str, before: str, after: str) -> None:
    ex = articles(data)
    refs = [e.summary if isinstance(e.summary, str) else " ".join(e.summary) for e in ex]
    a_all, b_all = json.load(open(before)), json.load(open(after))
    scorer = rouge_scorer.RougeScorer(["rougeLsum"], use_stemmer=True)
    for beam in ("4", "1"):
        a, b = a_all[beam], b_all[beam]
        same = sum(x == y for x, y in zip(a, b))
        ra = 100 * sum(scorer.score(r, x)["rougeLsum"].fmeasure for r, x in zip(refs, a)) / len(a)
        rb = 100 * sum(scorer.score(r, y)["rougeLsum"].fmeasure for r, y in zip(refs, b)) / len(b)
        print(json.dumps({"beam": int(beam), "articles": len(a), "identical": same,
                          "identical_pct": round(100 * same / len(a), 2),
                          "rougeLsum_before": round(ra, 3), "rougeLsum_after": round(rb, 3)}))
        for x, y in [(x, y) for x, y in zip(a, b) if x != y][:3]:
            print("  before:", x, "\n  after: ", y)


if __name__ == "__main__":
    if sys.argv[1] == "decode":
        decode(*sys.argv[2:5])
    else:
        compare(*sys.argv[2:5])
