"""A digest-shaped JSONL corpus through the real readers: the summary's sentence lines and the
article's blank-line blocks survive conversion, tf.data and evaluation's reading."""

import gzip
import json

import numpy as np
import tensorflow as tf

from pgn_tf import evaluate
from pgn_tf import vocab as V
from pgn_tf.config import DataConfig
from pgn_tf.data import dataset
from pgn_tf.inference import evaluator
from pgn_tf.metrics import digests as digest_metrics
from pgn_tf.metrics import scoring

# (package long descriptions, their synopses): 3, 4 and 5 blocks.
DIGESTS = [
    (["Zorg is a game. It has cats.", "Libfoo parses files.\nIt is fast.", "A tool for dogs."],
     ["cat game", "file parser library (runtime)", "dog tool"]),
    (["One. Two.", "Three.", "Four five.", "Six."], ["alpha", "beta gamma", "delta", "eps"]),
    (["a b.", "c d.", "e f.", "g h.", "i j."], ["x y", "z", "w v", "u", "t s"]),
]


def _write(path):
    with gzip.open(path, "wt") as f:
        for i, (blocks, synopses) in enumerate(DIGESTS):
            f.write(json.dumps({"id": f"d{i}", "article": "\n\n".join(blocks),
                                "summary": "\n".join(s + " ." for s in synopses),
                                "parts": [f"p{j}" for j in range(len(blocks))]}) + "\n")


def test_summary_lines_and_article_blocks_survive_the_pipeline(tmp_path):
    path = str(tmp_path / "digests.jsonl.gz")
    _write(path)
    files = dataset.resolve_files(path, str(tmp_path / "cache"), verbose=0)
    cfg = DataConfig(vocab_size=100, max_enc_steps=400, max_dec_steps=100)
    voc = dataset.build_vocab(files, cfg, verbose=0)
    batch = next(iter(dataset.make_dataset(files, voc, cfg, 3, True, training=False)))
    sentences = [len(s) for _, s in DIGESTS]  # 3, 4, 5
    # the raw summary keeps one synopsis a line; the article its blank lines
    summaries = [s.decode() for s in batch["summary"].numpy()]
    assert [s.count("\n") + 1 for s in summaries] == sentences
    articles = [a.decode() for a in batch["article"].numpy()]
    assert [len(digest_metrics.split_blocks(a)) for a in articles] == sentences
    # the decoder's targets: every synopsis ends in ".", the sentence boundary it learns to
    # emit (the newline itself is whitespace to the tokenizer), then one [STOP]
    dot = voc.word_to_id(".")
    target, dec_len = batch["target"].numpy(), batch["dec_len"].numpy()
    got = [int(np.sum(t[:n] == dot)) for t, n in zip(target, dec_len)]
    assert got == sentences
    assert [int(t[n - 1]) for t, n in zip(target, dec_len)] == [V.STOP_ID] * 3


def test_evaluation_reads_the_sentence_lines_and_blocks(tmp_path):
    path = str(tmp_path / "digests.jsonl.gz")
    _write(path)
    examples = dataset.read_split(path, None, None)
    cfg = DataConfig()
    refs = [scoring.reference_text(e.summary, cfg) for e in examples]
    assert [r.count("\n") + 1 for r in refs] == [3, 4, 5]
    assert refs[0].split("\n")[1] == "file parser library ( runtime ) ."
    blocks = scoring.article_blocks(examples, refs, cfg)
    assert [len(b) for b in blocks] == [3, 4, 5]
    assert blocks[0][1] == ["libfoo", "parses", "files", ".", "it", "is", "fast", "."]
    # lead_blocks: one sentence a block
    lead = scoring.lead_blocks(blocks[0], cfg.max_enc_steps)
    assert " ".join(lead) == "zorg is a game . libfoo parses files . a tool for dogs ."
    # a one-line summary is not a digest
    flat = scoring.article_blocks(examples[:1], ["one line ."], cfg)
    assert flat == [None]


def test_the_tokenizer_sees_no_block_marks():
    # The article's blank lines are whitespace to the model (as See et al.'s articles carry no
    # paragraph marks); evaluation recovers the blocks from the raw text instead.
    from pgn_tf import text

    toks = text.tokenize(tf.constant(["a b.\n\nc d."])).to_list()[0]
    assert toks == [b"a", b"b", b".", b"c", b"d", b"."]


def test_evaluate_scores_another_systems_outputs_with_the_digest_counts(tmp_path, capsys):
    path = str(tmp_path / "digests.jsonl.gz")
    _write(path)
    outputs = tmp_path / "pred.txt"
    # digest 0: blocks 1 and 2 covered, block 1 twice (its sentence repeated); digest 1: one
    # block of four; digest 2: nothing
    outputs.write_text("cat game . file parser library ( runtime ) . cat game .\n"
                       "beta gamma .\nnone at all\n")
    out = tmp_path / "eval"
    metrics = evaluator.evaluate(evaluator.DecodedFileSource(str(outputs)), path,
                                 output_dir=str(out), bootstrap=0, progress=False).metrics
    rows = [json.loads(x) for x in (out / "decoded.jsonl").read_text().splitlines()]
    assert [(r["blocks"], r["blocks_matched"], r["sentences"], r["repeated_sentences"])
            for r in rows] == [(3, 2, 3, 1), (4, 1, 1, 0), (5, 0, 1, 0)]
    assert metrics["system"] == "decoded" and metrics["digest_examples"] == 3
    # (2/3 + 1/4 + 0/5) / 3 and (1/3 + 0 + 0) / 3
    assert metrics["block_match_pct"] == 30.56
    assert metrics["repeated_sentence_pct"] == 11.11
    assert metrics["sentences_per_summary"] == 1.67
    capsys.readouterr()
    outputs.write_text("one line\n")
    assert evaluate.main(["--decoded", str(outputs), "--data", path, "--quiet"]) != 0
    assert "has 1 lines for 3 examples" in capsys.readouterr().err
