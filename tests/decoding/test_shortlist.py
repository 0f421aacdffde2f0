"""decode.shortlist (pgn_tf.decoding.shortlist): the batch's candidate columns, the shortlisted
step against a NumPy reference (the full distribution renormalised over the candidates), the
shortlisted search against the full one, the compiled step and the export."""

import copy

import numpy as np
import pytest
import tensorflow as tf

from pgn_tf import config as config_lib
from pgn_tf import vocab as vocab_lib
from pgn_tf.decoding import shortlist
from pgn_tf.decoding.constraints import Constraints
from pgn_tf.decoding.search import DecodeRequest, Search
from pgn_tf.inference.summarizer import Summarizer
from pgn_tf.layers.pointer import Mixture, dense_distribution
from pgn_tf.models import build_model
from tests.decoding.mixture_check import assert_candidates_match_dense

WORDS = 1100  # article words w0 .. w1099; the vocabulary holds w0 .. w995 (ids 4 .. 999)
V = 1000
STOP, UNK = vocab_lib.STOP_ID, vocab_lib.UNK_ID


def random_articles(seed, n, low=12, high=40):
    """Articles of random words, some out of the vocabulary (w996 and above), repeats too."""
    rng = np.random.default_rng(seed)
    return [" ".join(f"w{j}" for j in rng.integers(0, WORDS, rng.integers(low, high)))
            for _ in range(n)]


def make_summarizer(model_type="pointer_generator", pointer_gen=True, seed=0, **decode):
    """A small model with random weights large enough that P_vocab, p_gen and the attention
    all matter (an untrained model's P_vocab is uniform)."""
    cfg = config_lib.preset("tiny")
    cfg.model.model_type, cfg.model.pointer_gen = model_type, pointer_gen
    cfg.model.hidden_dim, cfg.model.emb_dim = 16, 8
    cfg.decode.min_dec_steps, cfg.decode.max_dec_steps, cfg.decode.beam_size = 3, 10, 3
    for key, value in decode.items():
        setattr(cfg.decode, key, value)
    vocab = vocab_lib.Vocab([f"w{i}" for i in range(V - 4)])
    model = build_model(cfg.model, vocab.size)
    s = Summarizer(model, vocab, cfg.validate())
    s.summarize(tf.constant(["w1"]))  # builds every weight
    rng = np.random.default_rng(seed)
    for w in model.weights:
        w.assign(rng.normal(0.0, 0.6, w.shape).astype(w.dtype))
    return s


@pytest.fixture(scope="module")
def summarizer():
    return make_summarizer()


def test_candidate_columns_are_the_frequent_words_the_specials_and_the_articles():
    """Ascending ids: the 4 specials and the K most frequent words (ids < 4 + K), every id of
    the batch's articles, topped up with the next lowest ids to a multiple of 128."""
    enc_ids = tf.constant([[500, 7, 500, 0], [999, 1, 0, 0]], tf.int32)
    cols = shortlist.candidate_columns(enc_ids, V, 3).numpy()
    members = set(range(7)) | {500, 999}
    top_up = [i for i in range(V) if i not in members][:128 - len(members)]
    assert cols.tolist() == sorted(members | set(top_up))
    assert shortlist.candidate_columns(enc_ids, V, 3, multiple=4).numpy().tolist() == [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 500, 999]  # 9 members, 3 of top-up
    small = tf.constant([[149, 7]], tf.int32)  # 145 words round up past a vocabulary of 150
    assert shortlist.candidate_columns(small, 150, 140).numpy().tolist() == list(range(150))
    pos = shortlist.positions(tf.constant([0, 2, 5]), 6).numpy()
    assert pos.tolist() == [0, 3, 1, 3, 3, 2]  # 3 (= C): no column
    x = tf.constant([[0.5, 0.25, 0.25]])
    assert shortlist.to_vocab(x, tf.constant(pos)).numpy().tolist() == [
        [0.5, 0.0, 0.25, 0.0, 0.0, 0.25]]


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _step(s, feats, frequent, mixture, ids=None):
    """One step of the search from [START] (1 hypothesis an article): step_fn's output."""
    state, step_fn = s.search_inputs(feats, 1, mixture=mixture, shortlist=frequent)
    b = int(feats["enc_ids"].shape[0])
    ids = tf.fill([b], vocab_lib.START_ID) if ids is None else ids
    return step_fn(ids, tf.constant(0), state)[0]


@pytest.mark.parametrize("frequent", [1, 5, 200])
def test_the_shortlisted_step_is_the_full_one_renormalised_over_its_candidates(summarizer,
                                                                              frequent):
    """See et al. eq. 9 with P_vocab renormalised over the candidates C, in NumPy from the
    full step's parts: p_gen P_vocab(w) / sum_C P_vocab + (1 - p_gen) sum_{i: x_i = w} a_i,
    every other vocabulary word 0 (its log floored at log 1e-30); the OOV article words at
    their extended ids V + i, exactly as the full step puts them."""
    s = summarizer
    feats = s.encode_text(tf.constant(random_articles(1, 3)))
    full = _step(s, feats, 0, mixture=True)  # the full step's parts, [N, V] logits
    assert full.columns is None and full.logits.shape[1] == V
    p_vocab = _softmax(full.logits.numpy().astype(np.float64))
    p_gen, attn = full.p_gen.numpy()[:, None], full.attn.numpy()
    ext, n_oov = feats["enc_ext_ids"].numpy(), int(full.width) - V
    assert n_oov > 0  # the articles hold OOV words
    cols = shortlist.candidate_columns(feats["enc_ids"], V, frequent).numpy()
    member = np.zeros(V, bool)
    member[cols] = True
    want = np.zeros((3, V + n_oov))
    want[:, :V] = p_gen * np.where(member, p_vocab, 0) / (p_vocab * member).sum(1,
                                                                               keepdims=True)
    for r in range(3):
        np.add.at(want[r], ext[r], (1 - p_gen[r]) * attn[r])
    want_log = np.log(np.maximum(want, 1e-30))

    dense = _step(s, feats, frequent, mixture=False).numpy()  # greedy's, the features'
    mix = _step(s, feats, frequent, mixture=True)  # the beam search's
    assert mix.logits.shape[1] == len(cols) and mix.logits.shape[1] % 128 == 0
    np.testing.assert_array_equal(mix.columns.numpy(), cols)
    np.testing.assert_allclose(dense, want_log, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dense_distribution(mix).numpy(), want_log, rtol=1e-5, atol=1e-5)
    oov = ext >= V
    rows = np.nonzero(oov)[0]
    np.testing.assert_allclose(dense[rows, ext[oov]], want_log[rows, ext[oov]], rtol=1e-5)


def test_the_tail_sample_steps_evenly_through_the_ids_outside_the_candidates():
    """decode.shortlist_tail: m ids outside the columns at even steps in ascending order,
    each standing for (V - C) / m of them; every outside id once when m = V - C; [PAD]s
    weighing nothing when nothing is outside."""
    columns = tf.constant([0, 1, 2, 3, 4, 7], tf.int32)
    pos = shortlist.positions(columns, 12)  # outside: 5, 6, 8, 9, 10, 11
    ids, log_w = shortlist.tail_sample(pos, columns, 6)
    assert ids.numpy().tolist() == [5, 6, 8, 9, 10, 11] and abs(float(log_w)) < 1e-7
    ids, log_w = shortlist.tail_sample(pos, columns, 3)
    assert ids.numpy().tolist() == [6, 9, 11]  # outside ids 1, 3, 5: at (i + 0.5) * 2
    assert float(log_w) == pytest.approx(np.log(2.0))
    ids, log_w = shortlist.tail_sample(pos, columns, 12)  # each outside id twice
    assert ids.numpy().tolist() == [5, 5, 6, 6, 8, 8, 9, 9, 10, 10, 11, 11]
    assert float(log_w) == pytest.approx(np.log(0.5))
    every = tf.range(12)
    ids, log_w = shortlist.tail_sample(shortlist.positions(every, 12), every, 4)
    assert ids.numpy().tolist() == [0, 0, 0, 0] and float(log_w) == -np.inf


@pytest.mark.parametrize("frequent", [1, 5, 200])
@pytest.mark.parametrize("pointer_gen", [True, False])
def test_a_tail_sample_of_every_outside_word_makes_the_shortlisted_step_exact(frequent,
                                                                               pointer_gen):
    """With the tail's mass estimated from every word outside the candidates (m = V - C,
    each once: the estimate is the mass itself) a candidate's probability is the full
    step's, eq. 9's p_gen P_vocab(w) + (1 - p_gen) sum a_i with P_vocab over the whole
    vocabulary, the copy mass untouched; without the sample it is inflated by 1 / P_vocab(C)
    (the test above)."""
    s = make_summarizer(pointer_gen=pointer_gen, seed=11)
    feats = s.encode_text(tf.constant(random_articles(1, 3)))
    full = _step(s, feats, 0, mixture=False).numpy()
    cols = shortlist.candidate_columns(feats["enc_ids"], V, frequent).numpy()
    member = np.zeros(full.shape[1], bool)
    member[cols] = True
    member[V:] = True  # the OOV article words, copied only

    def shortlisted(tail, mixture):
        t = make_summarizer(pointer_gen=pointer_gen, seed=11, shortlist_tail=tail)
        out = _step(t, feats, frequent, mixture=mixture)
        return dense_distribution(out).numpy() if mixture else out.numpy()

    exact = shortlisted(V - len(cols), mixture=False)
    np.testing.assert_allclose(exact[:, member], full[:, member], rtol=1e-5, atol=1e-5)
    if pointer_gen:
        np.testing.assert_allclose(shortlisted(V - len(cols), mixture=True)[:, member],
                                   full[:, member], rtol=1e-5, atol=1e-5)
    twice = shortlisted(2 * (V - len(cols)), mixture=False)  # each twice, weighing 1/2
    np.testing.assert_allclose(twice[:, member], full[:, member], rtol=1e-5, atol=1e-5)
    renormalised = shortlisted(0, mixture=False)
    assert (renormalised[:, member] >= full[:, member] - 1e-5).all()
    assert (renormalised[:, member] - full[:, member]).max() > 0.1


@pytest.fixture(scope="module")
def tailed():
    return make_summarizer(shortlist_tail=37)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("bans", [False, True])
@pytest.mark.parametrize("tail", [False, True])
def test_the_mixture_of_a_shortlist_picks_what_its_dense_distribution_does(summarizer, tailed,
                                                                          seed, bans, tail):
    """The beam search's scoring of a shortlisted Mixture (columns mapped back to ids, bans
    mapped to columns, P_vocab scaled by the tail's estimate with decode.shortlist_tail)
    against top_k over its dense distribution, the constraints included."""
    rng = np.random.default_rng(seed)
    s = tailed if tail else summarizer
    b, beam, steps = 3, 4, 6
    feats = s.encode_text(tf.constant(random_articles(seed, b)))
    state, step_fn = s.search_inputs(feats, beam, mixture=True, shortlist=10)
    ids = tf.constant(rng.integers(4, V, size=b * beam), tf.int32)
    mix, _, _ = step_fn(ids, tf.constant(1), state)
    ext = np.repeat(feats["enc_ext_ids"].numpy(), beam, axis=0)
    seq = rng.integers(4, V, size=(b * beam, steps)).astype("int32")
    seq[:, :3] = ext[:, :3]  # emitted article words (OOVs among them)
    seq[:, 3] = mix.columns.numpy()[rng.integers(0, 50, size=b * beam)]
    kw = {}
    if bans:
        exempt = np.zeros(V, bool)
        exempt[:10] = True
        kw = dict(min_steps=9, unk_id=UNK, block_trigrams=True,
                  repeat_exempt=tf.constant(exempt))
    constraints = Constraints(STOP, **kw)
    alive = rng.normal(size=(b, beam)).astype("float32")
    step = tf.constant(5)
    assert (mix.vocab_scale is not None) == tail
    got, valid, _ = assert_candidates_match_dense(mix, constraints, seq, step, alive, 2 * beam)
    tokens = got[2].numpy()[valid]
    assert np.isin(tokens[tokens < V], mix.columns.numpy()).all()


def _run(s, arts, frequent, request=None, reference=False):
    """The search's ids, lengths and scores for `arts`; reference: the full-vocabulary step
    with the logits of every word outside the batch's shortlist at -inf (the full softmax
    renormalised over the candidates), through the same search."""
    search = Search.from_params(s.cfg, request or DecodeRequest(), s.vocab.words)
    articles = tf.constant(arts)
    feats = dict(s.encode_text(articles), max_dec_steps=search.max_steps)
    state, step_fn = s.search_inputs(feats, search.hypotheses, mixture=search.mixture,
                                     shortlist=0 if reference else frequent)
    if reference:
        cols = shortlist.candidate_columns(feats["enc_ids"], V, frequent)
        member = tf.scatter_nd(cols[:, None], tf.ones_like(cols), [V]) > 0
        inner = step_fn

        def step_fn(ids, t, st):
            out, st, ex = inner(ids, t, st)
            if isinstance(out, Mixture):
                return out._replace(logits=tf.where(member, out.logits, -np.inf)), st, ex
            raise AssertionError("the reference wraps the beam search's Mixture step")

    src_len = tf.shape(feats["enc_ids"])[1]
    res = search.run(step_fn, state, batch_size=len(arts), src_len=src_len)
    return {k: v.numpy() for k, v in res.items()}, feats


@pytest.mark.parametrize("method", ["beam", "greedy"])
def test_a_shortlist_as_wide_as_the_vocabulary_is_the_full_search(summarizer, method):
    """K >= V: every word is a candidate, so the shortlisted search is the full one: the
    same ids and lengths, scores to float32 round-off (the gathered kernel is the whole
    kernel, its product summed in the same order or another)."""
    arts = random_articles(2, 5)
    request = DecodeRequest(method=method, tokens=True)
    want = summarizer.summarize(tf.constant(arts), request)
    got = summarizer.summarize(tf.constant(arts), DecodeRequest(method=method, tokens=True,
                                                                shortlist=V))
    for k in ("tokens", "raw_tokens", "length", "summaries"):
        np.testing.assert_array_equal(got[k].numpy(), want[k].numpy())
    np.testing.assert_allclose(got["scores"].numpy(), want["scores"].numpy(), rtol=1e-6)


@pytest.mark.parametrize("decode", [
    {}, {"block_trigrams": True, "avoid_unk": True, "replace_unk": False},
    {"block_repeated_words": True, "min_dec_steps": 6}])
def test_a_small_shortlist_searches_the_renormalised_distribution(decode):
    """K = 5: the shortlisted beam search equals the full search over the full distribution
    renormalised over the candidates (the other words' logits at -inf), the constraints
    included: only candidate ids and the articles' extended ids come out, [STOP] never before
    min_dec_steps, [UNK] never with avoid_unk."""
    s = make_summarizer(seed=4, **decode)
    arts = random_articles(3, 6)
    got, feats = _run(s, arts, 5)
    want, _ = _run(s, arts, 5, reference=True)
    for k in ("ids", "length"):
        np.testing.assert_array_equal(got[k], want[k])
    np.testing.assert_allclose(got["score"], want["score"], rtol=1e-5)
    cols = shortlist.candidate_columns(feats["enc_ids"], V, 5).numpy()
    ext = feats["enc_ext_ids"].numpy()
    frequent_only = set(range(4 + 5))
    emitted_rare = 0
    for r in range(len(arts)):
        ids = got["ids"][r, :got["length"][r]]
        assert all(i in cols or i in ext[r] for i in ids)
        assert all(i < V or i in ext[r] for i in ids)  # an extended id: its own article's OOV
        assert STOP not in ids and got["length"][r] >= s.cfg.decode.min_dec_steps
        if decode.get("avoid_unk"):
            assert UNK not in ids
        emitted_rare += sum(i not in frequent_only for i in ids)
    assert emitted_rare > 0  # article words and top-up words do come out


@pytest.mark.parametrize("tail", [0, 300])
def test_the_compiled_step_decodes_what_the_plain_shortlisted_step_does(tail):
    """decode.jit_step with a shortlist (and its tail's estimate): the candidate columns a
    multiple of 128 (a few widths, each compiled once), the same summaries as the plain
    shortlisted step."""
    plain = make_summarizer(seed=5, shortlist=20, shortlist_tail=tail)
    cfg = copy.deepcopy(plain.cfg)
    cfg.decode.jit_step = True
    jit = Summarizer(plain.model, plain.vocab, cfg.validate())
    arts = tf.constant(random_articles(6, 7, 3, 60) + ["", "w3 w4 ."])
    request = DecodeRequest(3, 8, 2, tokens=True)
    want = plain.compiled(arts, request)
    got = jit.compiled(arts, request)
    for k in ("tokens", "raw_tokens", "length", "summaries"):
        np.testing.assert_array_equal(got[k].numpy(), want[k].numpy())
    np.testing.assert_allclose(got["scores"].numpy(), want["scores"].numpy(), rtol=1e-5,
                               atol=1e-6)
    assert list(jit.__dict__.get("_jit_steps", {})) == [True]


def test_the_baseline_without_a_pointer_emits_candidates_only():
    """See et al.'s baseline (no pointer): log_softmax over the candidates, every other word
    at log 1e-30; the search emits candidate ids only, and with K >= V the full search's."""
    s = make_summarizer(pointer_gen=False, seed=7)
    arts = random_articles(8, 4)
    got, feats = _run(s, arts, 5)
    cols = shortlist.candidate_columns(feats["enc_ids"], V, 5).numpy()
    for r in range(len(arts)):
        assert np.isin(got["ids"][r, :got["length"][r]], cols).all()
    wide, _ = _run(s, arts, V)
    full, _ = _run(s, arts, 0)
    np.testing.assert_array_equal(wide["ids"], full["ids"])
    np.testing.assert_allclose(wide["score"], full["score"], rtol=1e-6)


def test_a_model_without_one_vocabulary_layer_refuses_the_shortlist():
    cfg = config_lib.preset("tiny")
    cfg.model.model_type = "abs"
    cfg.model.hidden_dim, cfg.model.emb_dim = 8, 4
    vocab = vocab_lib.Vocab([f"w{i}" for i in range(20)])
    s = Summarizer(build_model(cfg.model, vocab.size), vocab, cfg)
    with pytest.raises(ValueError, match="decode.shortlist needs model.model_type"):
        s.summarize(tf.constant(["w1 w2"]), DecodeRequest(shortlist=3))
    with pytest.raises(ValueError, match="shortlist must be an int"):
        DecodeRequest(shortlist=-1)


@pytest.mark.slow
def test_a_shortlisted_export_summarizes_as_in_process(tmp_path):
    """decode.shortlist baked into serving_default's graph (the config's K), and a request's
    own K through summarize_options' `shortlist` input, 0 giving the full vocabulary's
    summaries: core ops only, the served summaries the in-process ones, the input's range in
    the serving contract and asserted by the graph; SavedModelSummarizer passes a request's
    shortlist, and refuses one for an export without the input. The export estimates the
    mass outside the candidates (decode.shortlist_tail), which a K of 0 leaves nothing for."""
    from pgn_tf.inference.saved_model import SavedModelSummarizer
    from pgn_tf.saved_model import contract, export, graph_check
    from pgn_tf.utils.errors import UserError

    s = make_summarizer(seed=9, shortlist=5, shortlist_tail=50)
    path = str(tmp_path / "1")
    limits = export.option_limits(s.cfg)
    assert limits[contract.SHORTLIST] == (0, s.cfg.data.vocab_size)
    export.write_servable(path, s, limits, "m", {"config.json": s.cfg.save})
    assert not graph_check.unservable_ops(path)
    arts = random_articles(10, 4) + [""]
    loaded = tf.saved_model.load(path)
    served = contract.from_saved_model(loaded)
    assert served.input_limits[contract.SUMMARIZE_OPTIONS][contract.SHORTLIST] == \
        limits[contract.SHORTLIST]
    served.check_signatures({k: fn.structured_input_signature[1]
                             for k, fn in loaded.signatures.items()})
    got = loaded.signatures["serving_default"](articles=tf.constant(arts))
    want = s.summarize(tf.constant(arts))
    np.testing.assert_array_equal(got["summaries"].numpy(), want["summaries"].numpy())
    full_summarizer = make_summarizer(seed=9)
    full = full_summarizer.summarize(tf.constant(arts))
    assert (full["summaries"].numpy() != want["summaries"].numpy()).any()  # K = 5 matters

    def options(k, beam=1, steps=6, low=2):
        return loaded.signatures["summarize_options"](
            articles=tf.constant(arts), beam_size=tf.constant(beam),
            max_decode_steps=tf.constant(steps), min_decode_steps=tf.constant(low),
            shortlist=tf.constant(k))["summaries"].numpy()

    np.testing.assert_array_equal(
        options(5), s.summarize(tf.constant(arts), DecodeRequest(1, 6, 2))["summaries"].numpy())
    np.testing.assert_array_equal(
        options(40), s.summarize(tf.constant(arts),
                                 DecodeRequest(1, 6, 2, shortlist=40))["summaries"].numpy())
    dc = s.cfg.decode
    np.testing.assert_array_equal(  # 0: the full vocabulary, through the shortlisted graph
        options(0, dc.beam_size, dc.max_dec_steps, dc.min_dec_steps),
        full["summaries"].numpy())
    for bad in (-1, s.cfg.data.vocab_size + 1):
        with pytest.raises(tf.errors.InvalidArgumentError, match="shortlist must be between"):
            options(bad)

    api = SavedModelSummarizer(path)

    def api_summaries(api, k):
        return [r["summary"] for r in api.decode(arts, request=DecodeRequest(shortlist=k))]

    assert api_summaries(api, 0) == [x.decode() for x in full["summaries"].numpy()]
    assert api_summaries(api, 5) == [x.decode() for x in want["summaries"].numpy()]
    plain = str(tmp_path / "2")
    export.write_servable(plain, full_summarizer, export.option_limits(full_summarizer.cfg),
                          "m", {"config.json": full_summarizer.cfg.save})
    assert "shortlist" not in tf.saved_model.load(plain).signatures[
        "summarize_options"].structured_input_signature[1]
    with pytest.raises(UserError, match="decodes over the full vocabulary"):
        api_summaries(SavedModelSummarizer(plain), 5)
