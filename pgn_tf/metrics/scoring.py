"""How summaries are scored, as the papers score them: ROUGE-1/2/Lsum F1 (rouge-score, stemmed,
sentences on separate lines for rougeLsum, bootstrap 95% intervals), See et al.'s repetition
(Fig. 4) and novelty (Fig. 6), the shares of outputs repeating a token, a word or a content
word, novel words (output words absent from the article), [UNK] rates, fluency (the outputs'
perplexity under a reference-trained n-gram model, metrics.fluency), Rush et al.'s 75-byte
recall, and the lead baselines that need no model. Pure functions of token lists: evaluation,
validation ROUGE during training, the pipelines and the benchmarks all score with these.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from pgn_tf import config as config_lib
from pgn_tf import text
from pgn_tf.data.example import Example
from pgn_tf.metrics import digests, fluency
from pgn_tf.text import is_content_word, is_word, tokens_to_sentences
from pgn_tf.utils.errors import UserError

BASELINES = ("lead", "lead_blocks")  # the baselines evaluation scores without a model


def tokenize_texts(texts: list[str], cfg: config_lib.DataConfig) -> list[list[str]]:
    out = []
    for i in range(0, len(texts), 512):
        rag = text.tokenize(tf.constant(texts[i : i + 512]), cfg.lowercase, cfg.replace_digits)
        out += [[t.decode("utf-8") for t in row] for row in rag.to_list()]
    return out


def reference_text(summary: str, cfg: config_lib.DataConfig) -> str:
    sents = [s for s in summary.split("\n") if s.strip()]
    return "\n".join(" ".join(toks) for toks in tokenize_texts(sents, cfg)) if sents else ""


def lead(article_tokens: list[str], sentences: int | None, words: int | None) -> list[str]:
    if words is not None:
        return article_tokens[:words]
    out, n = [], 0
    for t in article_tokens:
        out.append(t)
        if t in (".", "!", "?"):
            n += 1
            if n >= sentences:
                break
    return out


def lead_blocks(block_tokens: list[list[str]], max_enc_steps: int) -> list[str]:
    """The lead baseline that fits a digest: the first sentence of each block, of the blocks
    within the first max_enc_steps article tokens (what a model reads), each ending in a
    sentence-ending token ("." added where the block has none before the cut), so the output
    has one sentence per block as the reference has."""
    out, offset = [], 0
    for block in block_tokens:
        seen = block[: max(0, max_enc_steps - offset)]
        offset += len(block)
        if not seen:
            break
        first = digests.sentences(seen)[0]
        out += first if first[-1] in text.SENTENCE_END_TOKENS else [*first, "."]
    return out


def ngrams(tokens: list[str], n: int) -> list[tuple]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def repeats(tokens: list[str]) -> bool:
    return len(tokens) != len(set(tokens))


def repeats_content_word(tokens: list[str]) -> bool:
    """Whether a content word (text.is_content_word, compared lowercased) occurs twice: "2048
    game game" does, "library for X and for Y" does not."""
    return repeats([t.lower() for t in tokens if is_content_word(t)])


def novel_words(tokens: list[str], article: list[str]) -> tuple[int, int]:
    """(output words absent from the article, output words): words (text.is_word) only, so
    that punctuation the article lacks is not counted. For a copy model a word from nowhere is
    a hallucination signal; the references' own share says how abstractive the corpus is."""
    source = set(article)
    words = [t for t in tokens if is_word(t)]
    return sum(t not in source for t in words), len(words)


def repetition_and_novelty(decoded: list[list[str]], articles: list[list[str]]) -> dict:
    """See et al. Fig. 4 (duplicates within a summary) and Fig. 6 (n-grams not in the article);
    the shares of outputs that repeat a token (any token) and a word (`is_word` tokens only:
    "puzzle puzzle game" counts, "a , b , c" does not)."""
    stats = {}
    for n in (1, 2, 3, 4):
        dup = tot = novel = 0
        for toks, art in zip(decoded, articles):
            grams = ngrams(toks, n)
            tot += len(grams)
            dup += len(grams) - len(set(grams))
            source = set(ngrams(art, n))
            novel += sum(g not in source for g in grams)
        stats[f"dup_{n}gram_pct"] = round(100 * dup / tot, 2) if tot else 0.0
        stats[f"novel_{n}gram_pct"] = round(100 * novel / tot, 2) if tot else 0.0
    sd = st = 0
    for toks in decoded:
        sents = [s for s in tokens_to_sentences(toks).split("\n") if s]
        st += len(sents)
        sd += len(sents) - len(set(sents))
    stats["dup_sentence_pct"] = round(100 * sd / st, 2) if st else 0.0
    stats["repeat_token_outputs_pct"] = share_pct([repeats(t) for t in decoded])
    stats["repeat_word_outputs_pct"] = share_pct([repeats([w for w in t if is_word(w)])
                                             for t in decoded])
    stats["repeat_content_word_outputs_pct"] = share_pct([repeats_content_word(t)
                                                         for t in decoded])
    novel = [novel_words(t, a) for t, a in zip(decoded, articles)]
    words = sum(n[1] for n in novel)
    stats["novel_word_pct"] = round(100 * sum(n[0] for n in novel) / words, 2) if words else 0.0
    stats["novel_word_outputs_pct"] = share_pct([n[0] > 0 for n in novel])
    stats["unk_outputs_pct"] = share_pct(["[UNK]" in t for t in decoded])
    stats["avg_summary_tokens"] = round(float(np.mean([len(t) for t in decoded])), 2)
    return stats


def share_pct(flags: list[bool]) -> float:
    return round(100 * float(np.mean(flags)), 2) if flags else 0.0


def truncate_bytes(tokens: list[str], limit: int) -> list[str]:
    """The first `limit` bytes of the space-joined tokens (UTF-8, never half a character), as
    tokens: DUC's -b 75 cuts the summary text there, mid-word if need be."""
    text = " ".join(tokens).encode("utf-8")[:limit].decode("utf-8", "ignore")
    return text.split()


def rouge(decoded: list[str], references: list[str], bootstrap: int = 1000, seed: int = 0,
          measure: str = "fmeasure") -> dict:
    """ROUGE-1/2/Lsum x100 (measure: "fmeasure", "recall" or "precision") with bootstrap 95%
    intervals (rouge-score); bootstrap=0 gives the plain means only."""
    from rouge_score import rouge_scorer, scoring

    keys = ("rouge1", "rouge2", "rougeLsum")
    scorer = rouge_scorer.RougeScorer(list(keys), use_stemmer=True)
    if bootstrap <= 0:  # plain means, no intervals (tuning loops)
        scores = [scorer.score(r, d) for d, r in zip(decoded, references)]
        return {k: round(100 * float(np.mean([getattr(s[k], measure) for s in scores])), 2)
                for k in keys}
    np.random.seed(seed)  # BootstrapAggregator resamples with numpy's global generator
    agg = scoring.BootstrapAggregator(confidence_interval=0.95, n_samples=bootstrap)
    for d, r in zip(decoded, references):
        agg.add_scores(scorer.score(r, d))
    result = agg.aggregate()
    out = {}
    for key in keys:
        s = result[key]
        out[key] = round(100 * float(getattr(s.mid, measure)), 2)
        out[f"{key}_ci95"] = [round(100 * float(getattr(s.low, measure)), 2),
                              round(100 * float(getattr(s.high, measure)), 2)]
    return out


def score(decoded: list[list[str]], references: list[str], article_tokens: list[list[str]],
          bootstrap: int = 1000, recall_bytes: int | None = None) -> dict:
    """ROUGE (rouge()) plus repetition and novelty (repetition_and_novelty()) of decoded token
    lists against tokenized references (reference_text()) and articles, and the references'
    own repetition rates. recall_bytes = n adds ROUGE recall of the decoded summaries cut to
    their first n bytes (`rouge<k>_recall_<n>b`; DUC 2004, Rush et al. 2015; the references are
    used whole: ROUGE-1.5.5's -b cuts them too, which leaves DUC's <= 75-byte references as
    they are but would shorten this corpus' longer ones)."""
    metrics = rouge([tokens_to_sentences(d) for d in decoded], references, bootstrap)
    metrics.update(repetition_and_novelty(decoded, article_tokens))
    ref_tokens = [r.split() for r in references]
    ref_stats = repetition_and_novelty(ref_tokens, article_tokens)
    metrics["reference_repeat_token_pct"] = ref_stats["repeat_token_outputs_pct"]
    metrics["reference_repeat_word_pct"] = ref_stats["repeat_word_outputs_pct"]
    metrics["reference_repeat_content_word_pct"] = ref_stats["repeat_content_word_outputs_pct"]
    metrics["reference_novel_word_pct"] = ref_stats["novel_word_pct"]
    # See et al.'s Fig. 4 and 6 show the references' bars beside the models'
    for key in [*(f"{k}_{n}gram_pct" for k in ("dup", "novel") for n in (1, 2, 3, 4)),
                "dup_sentence_pct"]:
        metrics[f"reference_{key}"] = ref_stats[key]
    if recall_bytes:
        cut = [tokens_to_sentences(truncate_bytes(d, recall_bytes)) for d in decoded]
        recall = rouge(cut, references, bootstrap, measure="recall")
        metrics.update({k.replace("_ci95", "") + f"_recall_{recall_bytes}b"
                        + ("_ci95" if k.endswith("_ci95") else ""): v
                        for k, v in recall.items()})
    return metrics


def fit_reference_lm(examples: list[Example], cfg: config_lib.DataConfig,
                     order: int = 3) -> fluency.KneserNeyLM:
    """The fluency model: a Kneser-Ney n-gram model (metrics.fluency) of the examples'
    reference summaries (the training split's), one sequence a reference line, tokenized as
    the model tokenizes."""
    lines = [x for e in examples for x in e.summary.split("\n") if x.strip()]
    return fluency.KneserNeyLM.fit(tokenize_texts(lines, cfg), order=order)


def articles_by_id(examples: list[Example], cfg: config_lib.DataConfig) -> dict[str, list[str]]:
    """Each example's article tokens by its id (novel words of decoded rows, which carry ids);
    UserError where two examples share an id."""
    ids = [e.id for e in examples]
    if len(set(ids)) != len(ids):
        raise UserError("the data's example ids are not unique: rows cannot be matched to "
                        "their articles")
    return dict(zip(ids, tokenize_texts([e.article for e in examples], cfg)))


def fluency_scores(lm: fluency.KneserNeyLM,
                   summaries: list[list[str]]) -> list[tuple[float, int]]:
    """Each summary's (negative log-probability, predicted tokens) under lm, sentence by
    sentence (split after ".", "!", "?" tokens)."""
    return [fluency.summary_nll(lm, digests.sentences(t)) for t in summaries]


def article_blocks(examples: list[Example], references: list[str],
                  cfg: config_lib.DataConfig) -> list[list[list[str]] | None]:
    """Each digest's article blocks as tokens (digests.split_blocks, the model's
    tokenizer); None for an example that is not a digest (digests.is_digest)."""
    blocks = [digests.split_blocks(e.article) for e in examples]
    keep = [digests.is_digest(b, [x for x in r.split("\n") if x.strip()])
            for b, r in zip(blocks, references)]
    flat = tokenize_texts([x for b, k in zip(blocks, keep) if k for x in b], cfg)
    out, i = [], 0
    for b, k in zip(blocks, keep):
        out.append(flat[i : i + len(b)] if k else None)
        i += len(b) if k else 0
    return out
