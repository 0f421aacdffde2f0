"""Does a summary cover every block of its article once? The measures of the Debian digests.

A digest's article is blocks of text separated by a blank line (one package's long description
each); its reference summary has one line per block, in the same order (that package's
synopsis), so a good summary covers every block once, in order (docs/results/digests.md). Output and
reference sentences are compared by ROUGE-1 F1 on rouge-score's tokens (lowercased, stemmed,
punctuation dropped: what `evaluate`'s rouge1 compares), and a pair *matches* at F1 >=
`threshold` (0.5 by default):

  block_match_pct        share of the article's blocks whose synopsis some output sentence
                         matches, averaged over the summaries; also at 0.3 and 0.7
                         (`block_match_pct_at_0.3`, `_at_0.7`), which show how much of the
                         figure hangs on the threshold.
  visible_block_match_pct  the same over the blocks that start within the first max_enc_steps
                         article tokens (the ones the model read); blocks_visible_pct says how
                         many those are.
  repeated_sentence_pct  share of output sentences that repeat an earlier sentence of the same
                         output (equal to it, or matching it at the threshold: exact repeats and
                         near ones; See et al.'s dup_sentence_pct counts exact repeats only),
                         averaged over the summaries.
  block_revisit_pct      share of output sentences whose best-matching block (at the threshold)
                         an earlier sentence of the same output already matched: a block
                         summarized twice.
  sentences_per_summary  output sentences (split after ".", "!", "?" tokens).

The references' own repeated_sentence_pct and block_revisit_pct come beside them (two
synopses of one digest can be alike: "library for X (development files)"). Examples whose
article's block count differs from their reference's line count, or with fewer than 2 blocks,
are not digests and are left out (`digest_examples` counts the ones scored).
"""

from __future__ import annotations

import collections
import re

import numpy as np

from pgn_tf import text

THRESHOLD = 0.5
THRESHOLDS = (0.3, 0.5, 0.7)  # block matching is reported at each; THRESHOLD is the headline


def split_blocks(article: str) -> list[str]:
    """The article's blocks: the text between blank lines (whitespace-only lines count as
    blank), empty blocks dropped."""
    return [b for b in re.split(r"\n[ \t\r\f\v]*\n", article) if b.strip()]


def sentences(tokens: list[str]) -> list[list[str]]:
    """Tokens -> sentences, each ending after a sentence-ending token (the last may not)."""
    out, cur = [], []
    for t in tokens:
        cur.append(t)
        if t in text.SENTENCE_END_TOKENS:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


class Rouge1:
    """ROUGE-1 F1 of two texts on rouge-score's tokens (its DefaultTokenizer, stemmed), the
    tokens of each text computed once."""

    def __init__(self):
        from rouge_score import tokenizers

        self._tokenizer = tokenizers.DefaultTokenizer(use_stemmer=True)
        self._cache: dict[str, collections.Counter] = {}

    def counts(self, sentence: str) -> collections.Counter:
        if sentence not in self._cache:
            self._cache[sentence] = collections.Counter(self._tokenizer.tokenize(sentence))
        return self._cache[sentence]

    def f1(self, a: str, b: str) -> float:
        """rouge-score's rouge1 fmeasure of a against b (symmetric)."""
        ca, cb = self.counts(a), self.counts(b)
        overlap = sum((ca & cb).values())
        if not overlap:
            return 0.0
        p, r = overlap / sum(ca.values()), overlap / sum(cb.values())
        return 2 * p * r / (p + r)

    def matrix(self, rows: list[str], cols: list[str]) -> np.ndarray:
        """float64 [len(rows), len(cols)] of F1."""
        return np.array([[self.f1(r, c) for c in cols] for r in rows], np.float64).reshape(
            len(rows), len(cols))


def visible_blocks(block_lengths: list[int], max_enc_steps: int) -> int:
    """How many blocks start within the first max_enc_steps tokens (block_lengths: each block's
    token count, in order): the blocks a model reading the cut article sees some of."""
    starts = np.cumsum([0, *block_lengths[:-1]])
    return int(np.sum(starts < max_enc_steps))


def repeats(output_sentences: list[str], rouge: Rouge1, threshold: float = THRESHOLD) -> int:
    """How many sentences equal or match (F1 >= threshold) some sentence before them (equal:
    the same tokens, which counts sentences without a word too, ". ." after ". .")."""
    sim = rouge.matrix(output_sentences, output_sentences)
    return sum(output_sentences[i] in output_sentences[:i] or bool(np.any(sim[i, :i] >= threshold))
               for i in range(len(output_sentences)))


def revisits(sim: np.ndarray, threshold: float = THRESHOLD) -> int:
    """sim: F1 [sentences, blocks]. How many sentences' best-matching block (matched at the
    threshold; the first of ties) an earlier sentence already matched as its best."""
    seen, n = set(), 0
    for row in sim:
        if row.size and row.max() >= threshold:
            best = int(np.argmax(row))
            n += best in seen
            seen.add(best)
    return n


def example(output_tokens: list[str], synopses: list[str], block_lengths: list[int],
            max_enc_steps: int, rouge: Rouge1, threshold: float = THRESHOLD) -> dict:
    """One digest's counts. output_tokens: the summary's tokens; synopses: the reference's
    lines (one per block, in order); block_lengths: the article's blocks' token counts.

    Returns blocks, visible (blocks), matched (blocks matched at `threshold`), matched_at
    {t: blocks matched at t for t in THRESHOLDS}, visible_matched, sentences, repeated,
    revisits: integers."""
    outs = [" ".join(s) for s in sentences(output_tokens)]
    sim = rouge.matrix(outs, synopses)  # [sentences, blocks]
    best = sim.max(axis=0) if outs else np.zeros(len(synopses))  # [blocks]
    visible = visible_blocks(block_lengths, max_enc_steps)
    return {
        "blocks": len(synopses), "visible": visible,
        "matched": int(np.sum(best >= threshold)),
        "matched_at": {t: int(np.sum(best >= t)) for t in THRESHOLDS},
        "visible_matched": int(np.sum(best[:visible] >= threshold)),
        "sentences": len(outs), "repeated": repeats(outs, rouge, threshold),
        "revisits": revisits(sim, threshold),
    }


def is_digest(blocks: list, reference_lines: list) -> bool:
    """A digest: at least 2 blocks (texts, or their token counts), one reference line each."""
    return len(blocks) >= 2 and len(blocks) == len(reference_lines)


def _mean_pct(num: list[int], den: list[int]) -> float:
    """100 x the mean of num/den over the examples (0 where den is 0)."""
    shares = [n / d if d else 0.0 for n, d in zip(num, den)]
    return round(100 * float(np.mean(shares)), 2) if shares else 0.0


def summarize(rows: list[dict], references: list[dict] | None = None) -> dict:
    """The measures (module docstring) from example() rows; `references`: example() rows of the
    references themselves, for the reference_* rates."""
    if not rows:
        return {}
    col = lambda key: [r[key] for r in rows]  # noqa: E731
    out = {
        "digest_examples": len(rows),
        "block_match_pct": _mean_pct(col("matched"), col("blocks")),
        **{f"block_match_pct_at_{t:g}": _mean_pct([r["matched_at"][t] for r in rows],
                                                  col("blocks"))
           for t in THRESHOLDS if t != THRESHOLD},
        "visible_block_match_pct": _mean_pct(col("visible_matched"), col("visible")),
        "blocks_visible_pct": _mean_pct(col("visible"), col("blocks")),
        "repeated_sentence_pct": _mean_pct(col("repeated"), col("sentences")),
        "block_revisit_pct": _mean_pct(col("revisits"), col("sentences")),
        "sentences_per_summary": round(float(np.mean(col("sentences"))), 2),
    }
    if references:
        ref = summarize(references)
        out["reference_repeated_sentence_pct"] = ref["repeated_sentence_pct"]
        out["reference_block_revisit_pct"] = ref["block_revisit_pct"]
        out["reference_sentences_per_summary"] = ref["sentences_per_summary"]
    return out


def per_example_shares(rows: list[dict]) -> dict[str, np.ndarray]:
    """Per-example block_match and repeated_sentence shares (x100, float64 [n]) from the
    `digest` fields evaluate writes to decoded.jsonl: the paired bootstrap's input."""
    def share(num, den):
        return np.array([100 * r[num] / r[den] if r[den] else 0.0 for r in rows], np.float64)

    return {"block_match": share("blocks_matched", "blocks"),
            "repeated_sentence": share("repeated_sentences", "sentences")}


def score(decoded: list[list[str]], references: list[str],
          block_lengths: list[list[int] | None], max_enc_steps: int,
          threshold: float = THRESHOLD) -> tuple[dict, list[dict | None]]:
    """The measures over the examples that are digests (is_digest).

    decoded: each summary's tokens; references: the tokenized references, one sentence a line
    (evaluate.reference_text); block_lengths: each article's blocks' token counts (None: not a
    digest). Returns (summarize() of them, each example's example() row or None)."""
    rouge = Rouge1()
    rows, ref_rows, per = [], [], []
    for tokens, ref, lengths in zip(decoded, references, block_lengths):
        lines = [line for line in ref.split("\n") if line.strip()]
        if lengths is None or not is_digest(lengths, lines):
            per.append(None)
            continue
        row = example(tokens, lines, lengths, max_enc_steps, rouge, threshold)
        rows.append(row)
        per.append(row)
        ref_rows.append(example(ref.split(), lines, lengths, max_enc_steps, rouge, threshold))
    return summarize(rows, ref_rows), per

