"""What a training run decodes while it trains: validation ROUGE, when the best checkpoint is
chosen by it (train.select_by = rouge, and always in an RL phase), and a few decoded samples with
their attention for TensorBoard. Both decode with the run's model, their compiled
functions built once and kept on the trainer."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from pgn_tf.utils.errors import UserError


def eval_rouge(trainer) -> dict:
    """ROUGE-1/2/Lsum F1 (x100, rouge-score, plain means) of train.eval_rouge_examples
    validation articles after the first train.eval_skip, decoded and scored by the one
    evaluator (inference.evaluator.decode_and_score: the decode config's search). The
    Summarizer and the prepared examples are kept on the trainer, so its compiled calls are
    traced once a run."""
    import itertools

    from pgn_tf.data import tfrecord
    from pgn_tf.inference.evaluator import ROUGE_KEYS, EvalSet, decode_and_score
    from pgn_tf.inference.summarizer import Summarizer

    if trainer._rouge_fn is None:
        records = itertools.chain.from_iterable(
            tfrecord.read_tfrecords(f) for f in trainer.eval_files)
        t = trainer.cfg.train
        examples = list(itertools.islice(records, t.eval_skip,
                                         t.eval_skip + t.eval_rouge_examples))
        if not examples:
            raise UserError(f"train.eval_skip={t.eval_skip} skips every "
                            "validation example: nothing is left to select by ROUGE")
        summarizer = Summarizer(trainer.model, trainer.vocab, trainer.cfg)
        trainer._rouge_fn = (summarizer, EvalSet.prepare(examples, trainer.cfg.data))
    summarizer, evalset = trainer._rouge_fn
    metrics = decode_and_score(summarizer, evalset, bootstrap=0).metrics
    return {k: metrics[k] for k in ROUGE_KEYS}


def log_samples(trainer, step: int, num: int = 3) -> None:
    """Decodes a few validation articles into TensorBoard: text (article, reference,
    summary) and the attention heatmap with p_gen of each."""
    from pgn_tf import visualize
    from pgn_tf.data import tfrecord
    from pgn_tf.decoding.search import DecodeRequest
    from pgn_tf.inference.summarizer import Summarizer

    if trainer._samples is None:
        examples = []
        for ex in tfrecord.read_tfrecords(trainer.eval_files[0]):
            examples.append(ex)
            if len(examples) == num:
                break
        summarizer = Summarizer(trainer.model, trainer.vocab, trainer.cfg)
        fn = tf.function(lambda a: summarizer.summarize(a, DecodeRequest(attention=True)),
                         input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
        trainer._samples = (examples, fn)
    examples, fn = trainer._samples
    if not examples:
        return
    out = fn(tf.constant([e.article for e in examples]))
    with trainer.eval_writer.as_default(step=step):
        for i, ex in enumerate(examples):
            n = int(out["length"][i])
            summary = out["summaries"].numpy()[i].decode("utf-8", "replace")
            src_len = int(np.sum(out["source_tokens"].numpy()[i] != b""))
            tf.summary.text(f"sample_{i}", f"**article:** {ex.article[:500]}\n\n"
                            f"**reference:** {ex.summary}\n\n**decoded:** {summary}")
            image = visualize.attention_image(out["attention"].numpy()[i][:n, :src_len],
                                              out["p_gen"].numpy()[i][:n], scale=4)
            tf.summary.image(f"attention_{i}", image[None])
