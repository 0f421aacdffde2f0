"""Decoding a trained model: copying, bad input, evaluate and summarize CLIs."""

import copy
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from pgn_tf import config as config_lib
from pgn_tf import evaluate as evaluate_cli
from pgn_tf import summarize
from pgn_tf import vocab as vocab_lib
from pgn_tf.data import tfrecord
from pgn_tf.decoding.beam_search import beam_search
from pgn_tf.decoding.constraints import Constraints
from pgn_tf.decoding.search import DecodeRequest
from pgn_tf.inference import evaluator
from pgn_tf.inference.summarizer import Summarizer, pad_length
from pgn_tf.metrics import scoring
from pgn_tf.model_dir import ModelDir
from pgn_tf.models import build_model
from pgn_tf.text import is_word, tokens_to_sentences
from pgn_tf.utils.errors import UserError
from tests.decoding.see_reference import see_beam_search


@pytest.fixture(scope="module")
def summarizer(trained_model_dir):
    return Summarizer.from_model_dir(trained_model_dir)


@pytest.fixture(scope="module")
def validation(corpus):
    return list(tfrecord.read_tfrecords(corpus["validation"]))[:16]


def test_copies_oov_words_it_can_only_have_copied(summarizer, validation):
    out = summarizer.summarize(tf.constant([e.article for e in validation]))
    vocab = set(summarizer.vocab.words)
    copied = 0
    for ex, toks, n in zip(validation, out["tokens"].numpy(), out["length"].numpy()):
        words = [t.decode() for t in toks[:n]]
        oov = [w for w in words if w not in vocab]
        assert all(w in ex.article.lower() for w in oov)  # every OOV comes from its own article
        copied += len(oov)
    assert copied >= len(validation)  # names and numbers really are copied


def test_beam_one_equals_greedy_on_the_real_model(summarizer, validation):
    arts = tf.constant([e.article for e in validation[:6]])
    beam = summarizer.summarize(arts, DecodeRequest(beam_size=1))
    greedy = summarizer.summarize(arts, DecodeRequest(method="greedy"))
    np.testing.assert_array_equal(beam["tokens"].numpy(), greedy["tokens"].numpy())


def test_bad_articles_get_a_summary_each(summarizer):
    articles = ["", "   \n\t ", "word " * 100_000, b"caf\xc3\xa9 \xff\xfe\xfd broken".decode(
        "latin-1").encode("latin-1"), "ok article ."]
    arts = tf.constant([a if isinstance(a, bytes) else a.encode() for a in articles])
    out = summarizer.summarize(arts, DecodeRequest(attention=True))
    assert out["summaries"].shape == (5,)
    for s in out["summaries"].numpy():
        s.decode("utf-8")  # valid UTF-8 even for broken input
    assert np.all(np.isfinite(out["scores"].numpy()))


def test_no_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        ModelDir(str(tmp_path / "nope")).find_checkpoint()
    with pytest.raises(UserError, match="has no checkpoint"):
        ModelDir(str(tmp_path)).find_checkpoint()
    with pytest.raises(UserError, match="ckpt-9 does not exist"):
        ModelDir(str(tmp_path)).find_checkpoint(str(tmp_path / "ckpt" / "ckpt-9"))


@pytest.mark.slow
def test_evaluate_model_and_lead(trained_model_dir, corpus, tmp_path):
    result = evaluator.evaluate(evaluator.ModelDirSource(trained_model_dir), corpus["validation"],
                                limit=24, output_dir=str(tmp_path), bootstrap=100,
                                progress=False, rouge_recall_bytes=20)
    m = result.metrics
    assert m["examples"] == 24 and m["rouge1"] > 50
    assert m["rouge1_ci95"][0] <= m["rouge1"] <= m["rouge1_ci95"][1]
    # 20 bytes hold about 3 words of a synopsis: a recall well below the full summary's F1
    assert 0 < m["rouge1_recall_20b"] < m["rouge1"]
    assert m["rouge2_recall_20b_ci95"][0] <= m["rouge2_recall_20b"]
    assert m["raw_unk_outputs_pct"] >= m["unk_outputs_pct"]
    assert 0 <= m["repeat_word_outputs_pct"] <= m["repeat_token_outputs_pct"]
    assert "reference_repeat_word_pct" in m
    assert 0 < m["mean_p_gen"] < 1 and m["articles_per_sec"] > 0
    lines = [json.loads(x) for x in open(tmp_path / "decoded.jsonl")]
    assert len(lines) == 24 and lines[0]["reference"] and lines == result.rows
    lead = evaluator.evaluate(evaluator.BaselineSource("lead", lead_words=8),
                              corpus["validation"], limit=24, bootstrap=100).metrics
    assert lead["system"] == "lead8w" and lead["avg_summary_tokens"] == 8
    assert "output_dir" not in lead  # no model dir named: nothing written
    # the model's own summaries, read back as another system's file, score as they did
    again = evaluator.evaluate(
        evaluator.DecodedFileSource(str(tmp_path / "decoded.txt"), trained_model_dir),
        corpus["validation"], limit=24, output_dir=str(tmp_path / "file"), bootstrap=0)
    assert again.metrics["system"] == "decoded" and again.decoded == result.decoded
    assert again.metrics["rouge1"] == m["rouge1"] and "perplexity" not in again.metrics
    assert "perplexity" in m


def test_each_source_checks_its_options_when_made():
    refused = {
        "needs the model dir's path": lambda: evaluator.ModelDirSource(""),
        "beam_size must be at least 1, got 0": lambda: evaluator.ModelDirSource("m", beam_size=0),
        "not one string": lambda: evaluator.ModelDirSource("m", overrides="decode.beam_size=2"),
        "batch_size must be at least 1": lambda: evaluator.ExportSource("e", batch_size=0),
        "needs the export's version dir": lambda: evaluator.ExportSource(""),
        "unknown baseline 'lead4' \\(lead, lead_blocks\\)": lambda: evaluator.BaselineSource(
            "lead4"),
        "lead_sentences or lead_words, not both": lambda: evaluator.BaselineSource(
            "lead", lead_sentences=2, lead_words=8),
        "lead_blocks .* give it no lead_words": lambda: evaluator.BaselineSource(
            "lead_blocks", lead_words=8),
        "lead_words must be at least 1": lambda: evaluator.BaselineSource("lead", lead_words=0),
        "needs the file's path": lambda: evaluator.DecodedFileSource(""),
    }
    for match, make in refused.items():
        with pytest.raises(UserError, match=match):
            make()
    lead = evaluator.BaselineSource("lead")
    assert (lead.lead_sentences, lead.system) == (3, "lead3")
    assert evaluator.BaselineSource("lead", lead_words=8).lead_sentences is None
    assert evaluator.BaselineSource("lead_blocks").system == "lead_blocks"
    source = evaluator.ModelDirSource("m", overrides=["decode.beam_size=2"])
    assert source.overrides == ("decode.beam_size=2",) and hash(source)  # frozen, hashable
    with pytest.raises(TypeError, match="evaluate takes a ModelDirSource"):
        evaluator.evaluate("runs/pgn", "validation.jsonl")  # a path is not a source


def test_the_output_dir_defaults_to_the_model_dir_a_source_names():
    sources = [evaluator.ModelDirSource("m"), evaluator.BaselineSource("lead", model_dir="m"),
               evaluator.ExportSource("e/1"), evaluator.DecodedFileSource("out.txt")]
    assert [evaluator.default_output_dir(s, "data/validation.jsonl.gz") for s in sources] == [
        os.path.join("m", "eval_validation")] * 2 + [None, None]


def flags_source(*flags):
    return evaluate_cli.source_from_flags(
        evaluate_cli.build_parser().parse_args(["--data", "d", *flags]))


def test_the_command_builds_the_source_its_flags_name(capsys):
    assert flags_source("--model_dir", "m", "--checkpoint", "latest", "--beam_size", "2",
                        "--set", "decode.min_dec_steps=1") == evaluator.ModelDirSource(
        "m", "latest", ("decode.min_dec_steps=1",), beam_size=2)
    assert flags_source("--saved_model", "e/1", "--batch_size", "8") == \
        evaluator.ExportSource("e/1", 8)
    assert flags_source("--baseline", "lead") == evaluator.BaselineSource("lead", 3)
    assert flags_source("--baseline", "lead", "--lead_words", "8", "--set", "data.lowercase=true") \
        == evaluator.BaselineSource("lead", lead_words=8, overrides=("data.lowercase=true",))
    assert flags_source("--baseline", "lead_blocks", "--model_dir", "m") == \
        evaluator.BaselineSource("lead_blocks", model_dir="m")
    assert flags_source("--decoded", "o.txt") == evaluator.DecodedFileSource("o.txt")
    refused = {
        "give --model_dir or --saved_model, not both": ["--model_dir", "m", "--saved_model", "e"],
        "give --baseline or --decoded, not both": ["--baseline", "lead", "--decoded", "o"],
        "--model_dir or --saved_model is required": [],
        "--set does not apply to an export": ["--saved_model", "e", "--set", "decode.x=1"],
        "--beam_size does not apply to an export": ["--saved_model", "e", "--beam_size", "2"],
        "--saved_model does not apply to --baseline lead": ["--baseline", "lead",
                                                            "--saved_model", "e"],
        "--beam_size does not apply to --decoded": ["--decoded", "o", "--beam_size", "2"],
        "--lead_words does not apply to a model's": ["--model_dir", "m", "--lead_words", "8"],
        "lead_blocks .* give it no lead_words": ["--baseline", "lead_blocks", "--lead_words", "8"],
    }
    for match, flags in refused.items():
        with pytest.raises(UserError, match=match):
            flags_source(*flags)
    assert evaluate_cli.main(["--data", "d", "--model_dir", "m", "--saved_model", "e"]) == 2
    assert capsys.readouterr().err.strip() == \
        "pgn_tf.evaluate: error: give --model_dir or --saved_model, not both"


def test_lead_blocks_needs_digests(corpus):
    with pytest.raises(UserError, match="needs digests"):
        evaluator.evaluate(evaluator.BaselineSource("lead_blocks"), corpus["validation"],
                           limit=4, bootstrap=0)


def test_repetition_and_novelty_stats():
    stats = scoring.repetition_and_novelty([["a", "b", "a", "b", "."]], [["a", "b", "c"]])
    assert stats["dup_1gram_pct"] == 40.0 and stats["dup_2gram_pct"] == 25.0
    assert stats["novel_1gram_pct"] == 20.0 and stats["repeat_token_outputs_pct"] == 100.0
    outputs = [["puzzle", "puzzle", "game"], ["a", ",", "b", ",", "c", "-", "-"], ["x", "2", "2"],
               ["one", "'s", "'s"]]
    stats = scoring.repetition_and_novelty(outputs, [[]] * 4)
    assert stats["repeat_token_outputs_pct"] == 100.0  # every output repeats some token
    assert stats["repeat_word_outputs_pct"] == 75.0  # punctuation repeats are not counted


def test_score_reports_reference_rates_and_recall_at_bytes():
    decoded = [["a", "b", "c", "d"], ["é", "é", "f"]]
    references = ["a b", "é f g"]
    m = scoring.score(decoded, references, [[], []], bootstrap=0, recall_bytes=3)
    assert m["reference_repeat_word_pct"] == 0.0 and m["repeat_word_outputs_pct"] == 50.0
    # "a b c d" -> "a b" (recall 1); "é é f" -> "é" (3 bytes: a 2-byte character and a space),
    # which rouge-score's tokenizer (ASCII letters and digits only) reads as no word: recall 0
    assert m["rouge1_recall_3b"] == 50.0
    assert scoring.score([["a", "b", "c", "d"]], ["a b"], [[]], bootstrap=0,
                          recall_bytes=1)["rouge1_recall_1b"] == 50.0
    assert scoring.truncate_bytes(["héllo", "wörld", "x"], 8) == ["héllo", "w"]
    assert scoring.truncate_bytes(["héllo"], 2) == ["h"]  # never half a character


def test_beam_search_on_the_model_equals_see_et_al_one_article_at_a_time(summarizer, validation):
    """The batched in-graph search (articles of different lengths together, finished ones leaving
    the batch) against the plain-Python port of See et al.'s search, run on one article at a
    time on the same trained model."""
    arts = [e.article for e in validation[:3]] + ["", "a short one ."]
    beam, max_steps, min_steps = 3, 10, 2
    out = summarizer.summarize(tf.constant(arts), DecodeRequest(beam, max_steps, min_steps))
    assert len(set(out["length"].numpy().tolist())) >= 2
    for i, article in enumerate(arts):
        feats = dict(summarizer.encode_text(tf.constant([article])),
                     max_dec_steps=tf.constant(max_steps))
        state, step_fn = summarizer.search_inputs(feats, beam)
        ids, score = see_beam_search(step_fn, state, beam, max_steps, vocab_lib.START_ID,
                                     vocab_lib.STOP_ID, min_steps)
        words = vocab_lib.ids_to_words(tf.constant([ids or [0]], tf.int32), summarizer.words,
                                       feats["oovs"]).numpy()[0][: len(ids)]
        n = int(out["length"][i])
        assert out["raw_tokens"].numpy()[i][:n].tolist() == words.tolist()
        np.testing.assert_allclose(float(out["scores"][i]), score, rtol=1e-4)


def test_the_mixture_search_decodes_what_the_dense_one_does(summarizer, validation):
    """summarize's beam search scores the pointer mixture in parts (layers.pointer.Mixture); the
    same search over the whole extended-vocabulary distribution picks the same summaries, with
    every constraint on."""
    s = Summarizer(summarizer.model, summarizer.vocab, copy.deepcopy(summarizer.cfg))
    dc = s.cfg.decode
    dc.block_repeated_words, dc.avoid_unk, dc.block_trigrams = True, True, True
    arts = tf.constant([e.article for e in validation[:8]] + [""])
    beam, max_steps, min_steps = 3, 12, 3
    out = s.summarize(arts, DecodeRequest(beam, max_steps, min_steps))
    feats = dict(s.encode_text(arts), max_dec_steps=tf.constant(max_steps))
    state, step_fn = s.search_inputs(feats, beam, mixture=False)
    exempt = tf.constant([w in vocab_lib.SPECIAL_TOKENS or not is_word(w)
                          for w in s.vocab.words], tf.bool)
    dense = beam_search(step_fn, state, batch_size=9, beam_size=beam, max_steps=max_steps,
                        start_id=vocab_lib.START_ID,
                        constraints=Constraints(vocab_lib.STOP_ID, min_steps=min_steps,
                                                block_trigrams=True, unk_id=vocab_lib.UNK_ID,
                                                repeat_exempt=exempt))
    np.testing.assert_array_equal(out["length"].numpy(), dense["length"].numpy())
    words = vocab_lib.ids_to_words(dense["ids"], s.words, feats["oovs"]).numpy()
    for i, n in enumerate(out["length"].numpy()):
        assert out["raw_tokens"].numpy()[i][:n].tolist() == words[i][:n].tolist()
    np.testing.assert_allclose(out["scores"].numpy(), dense["score"].numpy(), rtol=1e-4)
    copied = [t for row in out["raw_tokens"].numpy() for t in row if t]
    assert any(t.decode() not in s.vocab.words for t in copied)  # OOVs were copied


def test_replace_unk_puts_the_most_attended_source_word(trained_model_dir, validation):
    s = Summarizer.from_model_dir(trained_model_dir)
    # a model that generates (p_gen near 1) and says [UNK] for the words it used to copy:
    # "[UNK] planted [UNK] trees ..." where it said "sarulul planted 887 trees ..."
    bias = s.model.vocab_proj.bias
    bias.assign(tf.tensor_scatter_nd_add(bias, [[vocab_lib.UNK_ID]], [20.0]))
    s.model.cell.switch.dense.bias.assign([20.0])
    arts = tf.constant([e.article for e in validation[:4]])
    out = {k: v.numpy() for k, v in s.summarize(arts, DecodeRequest(attention=True)).items()}
    replaced = 0
    for b in range(4):
        for t in range(out["length"][b]):
            if out["raw_tokens"][b, t] == b"[UNK]":
                src = out["source_tokens"][b, out["attention"][b, t].argmax()]
                assert out["tokens"][b, t] == src != b"[UNK]"
                replaced += 1
            else:
                assert out["tokens"][b, t] == out["raw_tokens"][b, t]
    assert replaced >= 4
    assert any(b"[UNK]" in x for x in out["raw_summaries"])
    assert not any(b"[UNK]" in x for x in out["summaries"])
    s.cfg.decode.replace_unk = False
    off = s.summarize(arts)
    np.testing.assert_array_equal(off["tokens"].numpy(), out["raw_tokens"])


@pytest.mark.slow
@pytest.mark.parametrize("method", ["beam", "greedy"])
def test_the_jit_step_decodes_what_the_plain_step_does(summarizer, validation, method):
    """decode.jit_step (the step one XLA cluster, the source padded, the beam search's batch
    shrinking to powers of two) through the compiled call evaluate runs: the same summaries
    as the plain step, with articles of different lengths finishing at different steps."""
    cfg = copy.deepcopy(summarizer.cfg)
    cfg.decode.jit_step = True
    jit = Summarizer(summarizer.model, summarizer.vocab, cfg.validate())
    arts = tf.constant([e.article for e in validation[:7]] + ["", "a short one ."])
    request = DecodeRequest(3, 12, 2, method=method, tokens=True)
    want = summarizer.compiled(arts, request)
    got = jit.compiled(arts, request)
    assert len(set(want["length"].numpy().tolist())) >= 3
    for k in ("tokens", "raw_tokens", "length", "summaries"):
        np.testing.assert_array_equal(got[k].numpy(), want[k].numpy())
    # XLA may sum in another order: float32 round-off only
    np.testing.assert_allclose(got["scores"].numpy(), want["scores"].numpy(), rtol=1e-5,
                               atol=1e-6)
    # compiled where the shapes allow: the beam search's Mixture step; greedy search reads
    # the pointer's dense distribution, whose width varies by batch, so its step stays plain
    compiled = jit.__dict__.get("_jit_steps", {})
    assert list(compiled) == ([True] if method == "beam" else [])
    assert all(f.experimental_get_tracing_count() >= 1 for f in compiled.values())


def test_pad_length_rounds_the_source_up_within_the_cap():
    def padded(length, cap):
        out = pad_length(tf.fill([2, length], "w"), 64, cap).numpy()
        assert (out[:, :length] == b"w").all() and (out[:, length:] == b"").all()
        return out.shape[1]

    assert [padded(n, 400) for n in (1, 60, 64, 65, 130, 390, 400)] == [64, 64, 64, 128, 192,
                                                                         400, 400]
    assert [padded(n, 60) for n in (1, 60)] == [60, 60]


def test_sorted_batches_come_back_in_input_order(summarizer, validation):
    examples = validation[:10]
    # Longest first, batches of 4: every batch holds other articles than input order would.
    got = evaluator.decode_split(summarizer, examples, batch_size=4,
                                  lengths=[-len(e.article) for e in examples])
    out = summarizer.summarize(tf.constant([e.article for e in examples]))
    for i, (toks, raw, n) in enumerate(zip(out["tokens"].numpy(), out["raw_tokens"].numpy(),
                                           out["length"].numpy())):
        assert got.tokens[i] == [t.decode() for t in toks[:n]]
        assert got.raw_tokens[i] == [t.decode() for t in raw[:n]]
    assert len(got.p_gen) == 10 and all(np.isnan(got.p_gen))  # not asked for


@pytest.mark.slow
def test_decode_rows_carry_tokens_p_gen_and_a_beam_override(summarizer, validation):
    articles = [e.article for e in validation[:6]]
    rows = summarizer.decode(articles, 4, request=DecodeRequest(tokens=True, p_gen=True))
    out = summarizer.summarize(tf.constant(articles), DecodeRequest(p_gen=True))
    for i, row in enumerate(rows):
        n = int(out["length"][i])
        assert row["summary"] == out["summaries"].numpy()[i].decode()
        assert row["tokens"] == [t.decode() for t in out["tokens"].numpy()[i][:n]]
        assert row["p_gen"] == pytest.approx(float(np.mean(out["p_gen"].numpy()[i][:n])))
    greedy_like = summarizer.decode(articles, 4, request=DecodeRequest(beam_size=1))
    beam1 = summarizer.summarize(tf.constant(articles),
                                 DecodeRequest(beam_size=1))["summaries"].numpy()
    assert [r["summary"] for r in greedy_like] == [b.decode() for b in beam1]
    with pytest.raises(ValueError, match="beam_size"):
        summarizer.decode(articles, request=DecodeRequest(beam_size=0))
    with pytest.raises(ValueError, match="lengths"):
        summarizer.decode(articles, lengths=[1])


def test_fixed_length_decoding(summarizer, validation):
    s = Summarizer(summarizer.model, summarizer.vocab, copy.deepcopy(summarizer.cfg))
    s.cfg.decode.fixed_length = 5
    out = s.summarize(tf.constant([e.article for e in validation[:4]]))
    assert out["length"].numpy().tolist() == [5] * 4
    assert all(b"[STOP]" not in t for t in out["tokens"].numpy().ravel())


def test_abs_fixed_length_recombines_on_its_window(vocab, validation):
    cfg = config_lib.preset("tiny")
    cfg.model.model_type, cfg.model.abs_window = "abs", 2
    cfg.model.hidden_dim, cfg.model.emb_dim = 16, 8
    cfg.decode.fixed_length, cfg.decode.beam_size = 6, 3
    s = Summarizer(build_model(cfg.model, vocab.size), vocab, cfg)
    arts = [e.article for e in validation[:3]]
    out = s.summarize(tf.constant(arts))
    assert out["length"].numpy().tolist() == [6] * 3
    for i, article in enumerate(arts):
        feats = dict(s.encode_text(tf.constant([article])), max_dec_steps=tf.constant(6))
        state, step_fn = s.search_inputs(feats, 3)
        ids, score = see_beam_search(step_fn, state, 3, 6, vocab_lib.START_ID,
                                     vocab_lib.STOP_ID, min_steps=6, recombine_window=2)
        assert out["raw_tokens"].numpy()[i].tolist() == [vocab.words[j].encode() for j in ids]
        np.testing.assert_allclose(float(out["scores"][i]), score, rtol=1e-4)


@pytest.mark.parametrize("encoder", ["bow", "conv"])
def test_replace_unk_without_attention_avoids_unk(vocab, validation, encoder):
    """ABS's bag-of-words and convolutional encoders attend to no source word, so an [UNK] has
    nothing to be replaced by: with decode.replace_unk the search takes the best other word
    (Config.avoids_unk), and a user gets no [UNK]; without it, the model's [UNK] stays."""
    cfg = config_lib.resolve("debian_abs", [f"model.abs_encoder={encoder}"])
    cfg.model.hidden_dim, cfg.model.emb_dim, cfg.decode.beam_size = 16, 8, 3
    assert cfg.decode.replace_unk and cfg.avoids_unk() and not cfg.replaces_unk()
    s = Summarizer(build_model(cfg.model, vocab.size), vocab, cfg)
    s.summarize(tf.constant(["x"]))  # builds the weights
    bias = s.model.decoder.v.bias
    bias.assign(tf.tensor_scatter_nd_add(bias, [[vocab_lib.UNK_ID]], [20.0]))
    arts = tf.constant([e.article for e in validation[:4]])
    out = s.summarize(arts)
    n = out["length"].numpy()
    assert n.min() >= cfg.decode.min_dec_steps
    for row, k in zip(out["raw_tokens"].numpy(), n):
        assert b"[UNK]" not in row[:k].tolist()
    assert not any(b"[UNK]" in x for x in out["summaries"].numpy())
    s.cfg.decode.replace_unk = False  # the papers' setting: the model's own [UNK]s
    assert not s.cfg.avoids_unk()
    raw = s.summarize(arts)["raw_tokens"].numpy()
    assert all(b"[UNK]" in row.tolist() for row in raw)


@pytest.mark.slow
def test_summarize_cli_with_explain(trained_model_dir, summarizer, validation, tmp_path, capsys):
    html = tmp_path / "a.html"
    assert summarize.main(["--model_dir", trained_model_dir, validation[0].article,
                           "--explain", str(html)]) == 0
    summary = capsys.readouterr().out.strip()
    want = summarizer.summarize(tf.constant([validation[0].article]))
    assert summary == want["summaries"].numpy()[0].decode()
    page = html.read_text()
    n = int(want["length"][0])
    assert n >= 3 and "p_gen" in page and page.count("<tr><td><b>") == n  # a row per word
    png = tmp_path / "a.png"
    assert summarize.main(["--model_dir", trained_model_dir, validation[0].article,
                           "--explain", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    capsys.readouterr()
    assert summarize.main(["--model_dir", str(tmp_path / "none"), "x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"pgn_tf.summarize: error: model dir {tmp_path / 'none'} does not exist"]
    assert not (tmp_path / "none").exists()  # reading a model dir never creates one


def test_sentence_lines_give_one_sentence_a_line(summarizer, validation):
    s = Summarizer(summarizer.model, summarizer.vocab, copy.deepcopy(summarizer.cfg))
    s.cfg.decode.fixed_length = 16  # past the first sentence's end: more than one sentence
    articles = tf.constant([e.article for e in validation])
    flat = s.summarize(articles)["summaries"].numpy()
    s.cfg.decode.sentence_lines = True
    out = s.summarize(articles)
    lines = 0
    for summary, one, toks, n in zip(out["summaries"].numpy(), flat, out["tokens"].numpy(),
                                     out["length"].numpy()):
        want = tokens_to_sentences([t.decode() for t in toks[:n]]).split("\n")
        got = summary.decode().split("\n")
        assert len(got) == len(want)  # a line per sentence, as rougeLsum reads them
        assert " ".join(got) == one.decode()  # the same text, a newline after each sentence
        lines += len(got)
    assert lines > len(validation)  # some summary has two sentences or more


def test_an_unknown_decoding_method_is_an_error(trained_model_dir):
    summarizer = Summarizer.from_model_dir(trained_model_dir)
    with pytest.raises(ValueError, match="unknown decoding method 'sample' \\(beam, greedy\\)"):
        summarizer.summarize(tf.constant(["a b ."]), DecodeRequest(method="sample"))
