"""`python -m pgn_tf.evaluate`: decode a split and score it.

    python -m pgn_tf.evaluate --model_dir DIR --data PATH [--limit N] [--beam_size K]
        [--output_dir OUT] [--set decode.block_trigrams=true]
    python -m pgn_tf.evaluate --baseline lead --lead_sentences 3 --data PATH   # no model
    python -m pgn_tf.evaluate --baseline lead_blocks --data PATH   # digests: no model
    python -m pgn_tf.evaluate --decoded OUT.txt --data PATH   # another system's outputs

Reports ROUGE-1/2/Lsum F1 (rouge-score, stemmed, sentences on separate lines for rougeLsum,
bootstrap 95% intervals), average summary length, % duplicate 1-4-grams and sentences (See et
al. Fig. 4), % novel 1-4-grams w.r.t. the article (Fig. 6), mean p_gen, [UNK] rate (after and
before decode.replace_unk), and the shares of outputs that repeat a token and that repeat a
word (word tokens only, punctuation excluded), each beside the references' own rate. On
digests (articles of blank-line-separated blocks, one reference line per block), the block
measures of `pgn_tf.digest_metrics` too: blocks covered, sentences repeated, blocks revisited.
Baselines without a model: `lead` (the first --lead_sentences sentences, or --lead_words
words) and `lead_blocks` (the first sentence of each block the model would read).
`--decoded FILE` scores another system's outputs instead (one summary a line, in the order of
the data, retokenized with this project's tokenizer), every measure computed the same way.
`--rouge_recall_bytes 75` adds DUC-style ROUGE recall of the decoded summaries cut to their first
75 bytes (Rush et al. 2015's protocol). Writes decoded.jsonl, decoded.txt, reference.txt and
metrics.json to --output_dir (default <model_dir>/eval_<split name>).
"""

from __future__ import annotations

if __name__ == "__main__":  # the command line: quiet start, then main() (pgn_tf.commands)
    from pgn_tf.commands import run_command

    raise SystemExit(run_command("pgn_tf.evaluate"))
import argparse
import dataclasses
import json
import os
import time
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from pgn_tf import config as config_lib
from pgn_tf import digest_metrics, objectives, text
from pgn_tf.data import dataset, jsonl, tfrecord
from pgn_tf.data.example import Example, ReadStats
from pgn_tf.inference import Summarizer, is_word, tokens_to_sentences
from pgn_tf.utils import progress
from pgn_tf.utils.errors import UserError, run_cli
from pgn_tf.utils.quiet import add_verbose_flag


def read_split(path: str, fmt: str | None, limit: int | None) -> list[Example]:
    fmt = fmt or dataset.detect_format(path)
    if fmt == "tfrecord":
        files = sorted(tf.io.gfile.glob(path))
        if not files:
            raise UserError(f"data path {path} matches no file")
        tfrecord.validate_tfrecords(files)
        it = tfrecord.read_tfrecords(path)
    else:
        src = path.split(":")[1] if fmt == "tfds" else path.split(",")[0]
        if not tf.io.gfile.exists(src):
            raise UserError(f"data path {src} does not exist")
        it = dataset.read_examples(path, fmt, ReadStats())
    out = []
    for ex in it:
        if limit is not None and len(out) >= limit:
            break
        out.append(ex)
    if not out:
        raise UserError(f"data path {path} holds no examples")
    return out


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
        first = digest_metrics.sentences(seen)[0]
        out += first if first[-1] in text.SENTENCE_END_TOKENS else [*first, "."]
    return out


def ngrams(tokens: list[str], n: int) -> list[tuple]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def repeats(tokens: list[str]) -> bool:
    return len(tokens) != len(set(tokens))


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
    stats["repeat_token_outputs_pct"] = _pct([repeats(t) for t in decoded])
    stats["repeat_word_outputs_pct"] = _pct([repeats([w for w in t if is_word(w)])
                                             for t in decoded])
    stats["unk_outputs_pct"] = _pct(["[UNK]" in t for t in decoded])
    stats["avg_summary_tokens"] = round(float(np.mean([len(t) for t in decoded])), 2)
    return stats


def _pct(flags: list[bool]) -> float:
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


def perplexity(model, vocab, cfg: config_lib.Config, examples: list[Example],
               batch_size: int = 64, verbose: int | None = None) -> float:
    """exp(mean NLL per reference token) under teacher forcing (Rush et al. Table 2): the
    objectives' sequence_nll summed over tokens, divided by the token count. A progress bar
    counts the examples (verbose None: when stdout is a terminal)."""
    records = tf.data.Dataset.from_tensor_slices({
        "article": [e.article for e in examples], "summary": [e.summary for e in examples],
        "id": [e.id for e in examples]})
    ds = dataset.batch_records(records, vocab, cfg.data, batch_size, cfg.model.pointer_gen,
                               training=False, drop_empty=True).map(dataset.model_features)

    @tf.function(reduce_retracing=True)  # batches are padded to their own lengths
    def nll_sum(batch):
        log_p = model.token_log_probs(batch, model(batch, training=False))
        nll = objectives.sequence_nll(log_p, batch["dec_len"], "sum")
        return tf.reduce_sum(nll), tf.reduce_sum(tf.cast(batch["dec_len"], tf.float32))

    total = count = 0.0
    bar, done = progress.progbar(len(examples), "example", verbose), 0
    for batch in ds:
        nll, n = nll_sum(batch)
        total, count = total + float(nll), count + float(n)
        done += int(batch["enc_len"].shape[0])
        bar.update(done)
    bar.update(len(examples), finalize=True)  # examples without a summary are not batched
    return float(np.exp(total / count)) if count else float("nan")


def decode_fn(summarizer: Summarizer, beam_size: int | None, want_pgen: bool = True):
    """The compiled decode of a batch of raw articles (traced once per batch shape)."""
    return tf.function(
        lambda a: summarizer.summarize(a, beam_size=beam_size, with_p_gen=want_pgen),
        input_signature=[tf.TensorSpec([None], tf.string)],
    )


def decode_examples(summarizer: Summarizer, examples: list[Example], batch_size: int,
                    beam_size: int | None, want_pgen: bool = True, verbose: int = 1,
                    lengths: list[int] | None = None, fn=None):
    """Batched in-graph decoding; returns (token lists, per-summary mean p_gen, seconds, raw
    token lists before replace_unk), in the order of `examples`.

    Batches hold articles of similar length (sorted by `lengths`, default their whitespace
    token counts), so little of a batch is padding and its articles finish close together.
    `fn`: a decode_fn built earlier, so repeated calls (validation during training) reuse its
    traces."""
    fn = fn or decode_fn(summarizer, beam_size, want_pgen)
    import keras

    if lengths is None:
        lengths = [len(e.article.split()) for e in examples]
    order = sorted(range(len(examples)), key=lambda i: lengths[i])
    bar = keras.utils.Progbar(len(examples), verbose=verbose, interval=5.0)
    tokens: list = [None] * len(examples)
    raw: list = [None] * len(examples)
    pgens: list = [float("nan")] * len(examples)
    t0 = time.perf_counter()
    for i in range(0, len(examples), batch_size):
        rows = order[i : i + batch_size]
        out = fn(tf.constant([examples[r].article for r in rows]))
        n_out = out["length"].numpy()
        for r, row, raw_row, n in zip(rows, out["tokens"].numpy(), out["raw_tokens"].numpy(),
                                      n_out):
            tokens[r] = [t.decode("utf-8") for t in row[:n]]
            raw[r] = [t.decode("utf-8") for t in raw_row[:n]]
        if want_pgen and "p_gen" in out:
            for r, row, n in zip(rows, out["p_gen"].numpy(), n_out):
                pgens[r] = float(np.mean(row[:n])) if n else float("nan")
        bar.update(min(i + batch_size, len(examples)))
    return tokens, (pgens if want_pgen else []), time.perf_counter() - t0, raw


def article_blocks(examples: list[Example], references: list[str],
                  cfg: config_lib.DataConfig) -> list[list[list[str]] | None]:
    """Each digest's article blocks as tokens (digest_metrics.split_blocks, the model's
    tokenizer); None for an example that is not a digest (digest_metrics.is_digest)."""
    blocks = [digest_metrics.split_blocks(e.article) for e in examples]
    keep = [digest_metrics.is_digest(b, [x for x in r.split("\n") if x.strip()])
            for b, r in zip(blocks, references)]
    flat = tokenize_texts([x for b, k in zip(blocks, keep) if k for x in b], cfg)
    out, i = [], 0
    for b, k in zip(blocks, keep):
        out.append(flat[i : i + len(b)] if k else None)
        i += len(b) if k else 0
    return out


BASELINES = ("lead", "lead_blocks")


def read_decoded_file(path: str, n: int) -> list[str]:
    """The first n lines of a file of summaries (one a line; .gz read compressed)."""
    if not tf.io.gfile.exists(path):
        raise UserError(f"--decoded {path} does not exist")
    with jsonl.open_lines(path) as f:
        lines = [raw.decode("utf-8", "replace").rstrip("\n") for raw in f]
    if len(lines) < n:
        raise UserError(f"--decoded {path} has {len(lines)} lines for {n} examples")
    return lines[:n]


@dataclasses.dataclass
class Evaluation:
    """What `evaluate` returns: the metrics (the JSON line `python -m pgn_tf.evaluate` prints)
    and one row per example (id, decoded, reference; a digest's block counts), in the data's
    order."""

    metrics: dict
    rows: list[dict]


def evaluate(data: str, model_dir: str | None = None, *, data_format: str | None = None,
             limit: int | None = None, beam_size: int | None = None,
             batch_size: int | None = None, output_dir: str | None = None,
             checkpoint: str = "best", overrides: Sequence[str] = (),
             baseline: str | None = None, decoded: str | None = None, lead_sentences: int = 3,
             lead_words: int | None = None, bootstrap: int = 1000,
             rouge_recall_bytes: int | None = None, progress: bool = True) -> Evaluation:
    """Scores a model's summaries of `data` (decoded here, by Summarizer's batched beam search),
    a baseline's, or a file's (ROUGE with bootstrap intervals, repetition, novelty, the
    digests' blocks; perplexity and p_gen for a model).

    Args:
      data: any pgn_tf data path; limit: its first N examples.
      model_dir: the model (its `checkpoint`: best, latest or a path); overrides:
        "section.key=value" on its config (decode.*, data.*).
      baseline: "lead" (lead_sentences, or lead_words) or "lead_blocks"; decoded: a file of
        summaries, one a line; either scores without decoding (model_dir then only gives the
        tokenizer's config).
      beam_size, batch_size: decoding's (default the config's).
      output_dir: where decoded.jsonl, decoded.txt, reference.txt and metrics_NAME.json go
        (default <model_dir>/eval_<data name> with a model dir; none without).
      bootstrap: resamples of the confidence intervals (0: none);
      rouge_recall_bytes: also ROUGE recall of summaries cut to N bytes (DUC: 75).
    Raises UserError for a bad combination or path.
    """
    decoded_file = decoded
    if baseline and baseline not in BASELINES:
        raise UserError(f"unknown baseline '{baseline}' ({', '.join(BASELINES)})")
    if baseline and decoded_file:
        raise UserError("give --baseline or --decoded, not both")
    no_model = bool(baseline or decoded_file)
    if no_model:
        cfg = config_lib.Config()
        if model_dir:
            cfg = config_lib.load_from_model_dir(model_dir)
        config_lib.apply_overrides(cfg, list(overrides))  # data.* choose the tokenizer and the cut
    else:
        if not model_dir:
            raise UserError("--model_dir is required unless --baseline or --decoded is given")
        summarizer = Summarizer.from_model_dir(model_dir, checkpoint)
        cfg = summarizer.cfg
        config_lib.apply_overrides(cfg, list(overrides))
    examples = read_split(data, data_format, limit)
    art_tokens = tokenize_texts([e.article for e in examples], cfg.data)
    references = [reference_text(e.summary, cfg.data) for e in examples]
    blocks = article_blocks(examples, references, cfg.data)
    pgens: list[float] = []
    if decoded_file:
        decoded = tokenize_texts(read_decoded_file(decoded_file, len(examples)), cfg.data)
        seconds = 0.0
        name = "decoded"
    elif baseline == "lead_blocks":
        if not any(blocks):
            raise UserError(f"--baseline lead_blocks needs digests (articles of blocks between "
                            f"blank lines, one summary line per block); {data} has none")
        decoded = [lead_blocks(b, cfg.data.max_enc_steps) if b else lead(a, 1, None)
                   for a, b in zip(art_tokens, blocks)]
        seconds = 0.0
        name = "lead_blocks"
    elif baseline:
        words = lead_words
        sentences = None if words is not None else lead_sentences
        decoded = [lead(a, sentences, words) for a in art_tokens]
        seconds = 0.0
        name = f"lead{words}w" if words is not None else f"lead{sentences}"
    else:
        batch = batch_size or cfg.decode.batch_size
        decoded, pgens, seconds, raw = decode_examples(
            summarizer, examples, batch, beam_size, want_pgen=cfg.model.pointer_gen,
            verbose=1 if progress else 0, lengths=[len(a) for a in art_tokens])
        name = "model"
    metrics = {"system": name, "examples": len(examples)}
    metrics.update(score(decoded, references, art_tokens, bootstrap,
                         rouge_recall_bytes))
    digest, per_digest = digest_metrics.score(
        decoded, references, [[len(x) for x in b] if b else None for b in blocks],
        cfg.data.max_enc_steps)
    metrics.update(digest)
    if not no_model:
        metrics["raw_unk_outputs_pct"] = _pct(["[UNK]" in t for t in raw])
        metrics["perplexity"] = round(perplexity(summarizer.model, summarizer.vocab, cfg,
                                                 examples), 3)
    if pgens:
        metrics["mean_p_gen"] = round(float(np.nanmean(pgens)), 4)
    if seconds:
        metrics["decode_seconds"] = round(seconds, 2)
        metrics["articles_per_sec"] = round(len(examples) / seconds, 2)
        metrics["beam_size"] = beam_size or cfg.decode.beam_size
    out_dir = output_dir or (
        os.path.join(model_dir, "eval_" + os.path.basename(data.rstrip("/")).split(".")[0])
        if model_dir else None)
    rows = []
    for ex, d, r, g in zip(examples, decoded, references, per_digest):
        row = {"id": ex.id, "decoded": " ".join(d), "reference": r}
        if g:  # a digest's counts, for paired tests (digest_metrics.per_example_shares)
            row.update(blocks=g["blocks"], blocks_matched=g["matched"],
                       sentences=g["sentences"], repeated_sentences=g["repeated"])
        rows.append(row)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "decoded.jsonl"), "w") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
        with open(os.path.join(out_dir, "decoded.txt"), "w") as f:
            f.writelines(" ".join(d) + "\n" for d in decoded)
        with open(os.path.join(out_dir, "reference.txt"), "w") as f:
            f.writelines(r.replace("\n", " ") + "\n" for r in references)
        with open(os.path.join(out_dir, f"metrics_{name}.json"), "w") as f:
            json.dump(metrics, f, indent=2)
        metrics["output_dir"] = out_dir
    return Evaluation(metrics, rows)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pgn_tf.evaluate", description=__doc__.splitlines()[0])
    p.add_argument("--model_dir")
    p.add_argument("--data", required=True)
    p.add_argument("--data_format", choices=dataset.FORMATS)
    p.add_argument("--limit", type=int)
    p.add_argument("--beam_size", type=int)
    p.add_argument("--batch_size", type=int)
    p.add_argument("--output_dir")
    p.add_argument("--checkpoint", default="best",
                   help="best (default), latest, or a checkpoint path such as DIR/ckpt/ckpt-3000")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    p.add_argument("--baseline", choices=BASELINES,
                   help="score a baseline instead of a model: lead (--lead_sentences or "
                        "--lead_words) or lead_blocks (digests: each block's first sentence)")
    p.add_argument("--decoded", metavar="FILE",
                   help="score these summaries (one a line, in the data's order) instead of a "
                        "model's")
    p.add_argument("--lead_sentences", type=int, default=3)
    p.add_argument("--lead_words", type=int)
    p.add_argument("--bootstrap", type=int, default=1000)
    p.add_argument("--rouge_recall_bytes", type=int, metavar="N",
                   help="also report ROUGE recall of the summaries cut to N bytes (DUC: 75)")
    p.add_argument("--quiet", action="store_true")
    add_verbose_flag(p)
    return p


def run(args) -> Evaluation:
    """The parsed flags -> `evaluate` (the library call); prints its metrics as one JSON line."""
    result = evaluate(
        args.data, args.model_dir, data_format=args.data_format, limit=args.limit,
        beam_size=args.beam_size, batch_size=args.batch_size, output_dir=args.output_dir,
        checkpoint=args.checkpoint, overrides=args.set, baseline=args.baseline,
        decoded=args.decoded, lead_sentences=args.lead_sentences, lead_words=args.lead_words,
        bootstrap=args.bootstrap, rouge_recall_bytes=args.rouge_recall_bytes,
        progress=not args.quiet)
    print(json.dumps(result.metrics))
    return result


def main(argv: list[str] | None = None) -> int:
    return run_cli("pgn_tf.evaluate", run, build_parser().parse_args(argv))
