"""Searches scripted with a fake step function built from fixed log-probability tables."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from pgn_tf.decoding import greedy, sampling
from pgn_tf.decoding.beam_search import beam_search
from pgn_tf.decoding.beam_state import ARTICLE, ONCE, tile_beams
from pgn_tf.decoding.candidates import top_candidates
from pgn_tf.decoding.compaction import next_power_of_two
from pgn_tf.decoding.constraints import NEG_INF, Constraints
from pgn_tf.decoding.ranking import gnmt_coverage_penalty
from pgn_tf.layers.pointer import Mixture, copy_slots, dense_distribution
from tests.decoding.mixture_check import assert_candidates_match_dense
from tests.decoding.see_reference import see_beam_search

W, STOP, START = 4, 3, 0  # tokens 0, 1, 2 and [STOP]; [START] reuses id 0 as the first input
CONSTRAINT_KEYS = ("min_steps", "unk_id", "block_trigrams", "repeat_exempt")


def search_kw(batch, max_steps, beam=None, **kw) -> dict:
    """A search's arguments by name, the constraint keys of kw gathered into Constraints."""
    found = {k: kw.pop(k) for k in CONSTRAINT_KEYS if k in kw}
    beam_kw = {} if beam is None else {"beam_size": beam}
    return dict(batch_size=batch, max_steps=max_steps, start_id=START,
                constraints=Constraints(STOP, **found), **beam_kw, **kw)


def make_tables(seed, steps):
    rng = np.random.default_rng(seed)
    # log p(next | step, prev token, parity of the sum of previous tokens): the state matters,
    # so a search that reorders it wrongly gives different scores.
    logits = rng.normal(scale=2.0, size=(steps, W, 2, W))
    return (logits - np.log(np.exp(logits).sum(-1, keepdims=True))).astype("float32")


def fake_step_fn(table):
    table = tf.constant(table)

    def step_fn(ids, step, state):
        parity = state["sum"] % 2
        idx = tf.stack([tf.fill(tf.shape(ids), step), ids, parity], axis=1)
        log_probs = tf.gather_nd(table, idx)
        extras = {"attn": tf.one_hot(ids, 5), "p_gen": tf.cast(parity, tf.float32)}
        return log_probs, {"sum": state["sum"] + ids}, extras

    return step_fn


def score_of(table, seq):
    logp, prev, total = 0.0, START, 0
    for t, tok in enumerate(seq):
        logp += table[t, prev, total % 2, tok]
        total += prev
        prev = tok
    return logp


def exhaustive(table, max_steps, min_steps=0):
    best, best_seq = -np.inf, None
    for n in range(min_steps, max_steps):
        for body in itertools.product(range(3), repeat=n):
            seq = list(body) + [STOP]
            s = score_of(table, seq) / (len(seq) + 1)  # [START] counted, as See et al.
            if s > best:
                best, best_seq = s, list(body)
    return best_seq, best


def run_beam(table, batch, beam, max_steps, **kw):
    state = tile_beams({"sum": tf.zeros([batch], tf.int32)}, beam)
    return beam_search(fake_step_fn(table), state, **search_kw(batch, max_steps, beam, **kw))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("min_steps", [0, 2])
def test_wide_beam_equals_exhaustive_search(seed, min_steps):
    max_steps = 4
    table = make_tables(seed, max_steps)
    # 27 prefixes x 4 tokens = 108 candidates at the last step: with 2K >= 108 nothing that could
    # win is ever dropped, so the beam must find the exhaustive optimum.
    res = run_beam(table, 2, 54, max_steps, min_steps=min_steps)
    ref_seq, ref_score = exhaustive(table, max_steps, min_steps)
    for b in range(2):  # both articles of the batch get the same (correct) answer
        n = int(res["length"][b])
        assert res["ids"].numpy()[b, :n].tolist() == ref_seq
        np.testing.assert_allclose(float(res["score"][b]), ref_score, rtol=1e-5)


@pytest.mark.parametrize("seed", range(5))
def test_beam_one_equals_greedy(seed):
    table = make_tables(seed + 10, 6)
    beam = run_beam(table, 3, 1, 6)
    g = greedy.search(fake_step_fn(table), {"sum": tf.zeros([3], tf.int32)}, **search_kw(3, 6))
    np.testing.assert_array_equal(beam["ids"].numpy(), g["ids"].numpy())
    np.testing.assert_array_equal(beam["length"].numpy(), g["length"].numpy())


def test_beam_finds_better_than_greedy_on_a_trap():
    # step 0: token 1 looks best (0.6) but leads to a flat distribution; token 2 (0.4) leads
    # to a certain STOP. Greedy takes 1, a beam of 2 finds 2 -> STOP.
    t = np.full((3, W, 2, W), np.log(0.25), "float32")
    t[0, START, 0] = np.log([1e-6, 0.6, 0.4 - 2e-6, 1e-6])
    t[1, 2, :] = np.log([1e-6, 1e-6, 1e-6, 1 - 3e-6])
    g = greedy.search(fake_step_fn(t), {"sum": tf.zeros([1], tf.int32)}, **search_kw(1, 3))
    b = run_beam(t, 1, 2, 3)
    assert g["ids"].numpy()[0, 0] == 1
    assert b["ids"].numpy()[0].tolist()[:1] == [2] and int(b["length"][0]) == 1


def test_trigram_blocking_and_min_length():
    # A model that always wants to say 1 2 1 2 ... and never stop.
    t = np.full((12, W, 2, W), np.log(1e-4), "float32")
    t[:, :, :, 1] = np.log(0.5)
    t[:, 1, :, 2] = np.log(0.9)
    t[:, 1, :, 1] = np.log(0.05)
    res = run_beam(t, 2, 3, 12, block_trigrams=True)
    for b in range(2):
        seq = res["ids"].numpy()[b, : int(res["length"][b])].tolist()
        trigrams = [tuple(seq[i : i + 3]) for i in range(len(seq) - 2)]
        assert len(trigrams) == len(set(trigrams)) and len(seq) >= 3
    free = run_beam(t, 1, 3, 12)
    seq = free["ids"].numpy()[0].tolist()
    assert len({tuple(seq[i : i + 3]) for i in range(10)}) < 10  # it does repeat without


def test_constrain_bans_stop_before_min_and_unk():
    lp = tf.zeros([2, 5])
    out = Constraints(stop_id=3, min_steps=2, unk_id=1).apply(
        lp, tf.zeros([2, 4], tf.int32), tf.constant(1)).numpy()
    assert np.all(out[:, 3] < -1e8) and np.all(out[:, 1] < -1e8) and np.all(out[:, [0, 2, 4]] == 0)


def test_extras_follow_the_chosen_hypothesis():
    table = make_tables(3, 5)
    res = run_beam(table, 2, 4, 5, return_extras=True, src_len=5)
    ids = res["ids"].numpy()
    for b in range(2):
        n = int(res["length"][b])
        prev = [START] + ids[b, : n - 1].tolist() if n else []
        # the fake attention is one-hot on the previous token
        assert res["attn"].numpy()[b, :n].argmax(-1).tolist() == prev[:n]


def test_sampling_draws_valid_sequences():
    table = make_tables(4, 6)
    res = sampling.search(fake_step_fn(table), {"sum": tf.zeros([64], tf.int32)},
                          **search_kw(64, 6), seed=1)
    lengths = res["length"].numpy()
    assert len(set(map(tuple, res["ids"].numpy().tolist()))) > 3  # not all the same
    assert np.all(res["step_log_probs"].numpy() <= 0) and np.all(lengths <= 6)


# -- per-article stopping, checked against a plain-Python port of See et al.'s search ----------

L = 5  # source positions of the fake attention


def make_articles(seed, n_articles, steps, width=W, stop_bias=None):
    """Per-article tables: log p(next | article, step, prev, parity) [A, S, W, 2, W] and a soft
    attention [A, S, W, 2, L]; stop_bias [A] shifts [STOP]'s logit so articles end at
    different lengths."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=2.0, size=(n_articles, steps, width, 2, width))
    if stop_bias is not None:
        logits[..., STOP] += np.asarray(stop_bias, float)[:, None, None, None]
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    a = np.exp(rng.normal(scale=1.5, size=(n_articles, steps, width, 2, L)))
    return logp.astype("float32"), (a / a.sum(-1, keepdims=True)).astype("float32")


def article_step_fn(tables):
    logp, attn = tf.constant(tables[0]), tf.constant(tables[1])

    def step_fn(ids, step, state):
        idx = tf.stack([state[ARTICLE]["article"], tf.fill(tf.shape(ids), step), ids,
                        state["sum"] % 2], axis=1)
        extras = {"attn": tf.gather_nd(attn, idx),
                  "p_gen": tf.cast(state["sum"] % 3, tf.float32)}
        return (tf.gather_nd(logp, idx),
                {"sum": state["sum"] + ids, ARTICLE: state[ARTICLE]}, extras)

    return step_fn


def article_state(articles, beam):
    articles = tf.convert_to_tensor(articles, tf.int32)
    return tile_beams({"sum": tf.zeros_like(articles), ARTICLE: {"article": articles}}, beam)


def searcher(tables, beam, max_steps, graph=False, **kw):
    """articles (list of ints) -> the batched search's result as numpy arrays."""

    def run(arts):
        return beam_search(article_step_fn(tables), article_state(arts, beam),
                           **search_kw(tf.shape(arts)[0], max_steps, beam, src_len=L, **kw))

    if graph:  # the batch dimension is unknown while tracing, as in the exported graph
        run = tf.function(run, input_signature=[tf.TensorSpec([None], tf.int32)])
    return lambda articles: {k: v.numpy() for k, v in run(tf.constant(articles, tf.int32)).items()}


def batched(tables, articles, beam, max_steps, **kw):
    return searcher(tables, beam, max_steps, **kw)(articles)


def reference(tables, article, beam, max_steps, **kw):
    return see_beam_search(article_step_fn(tables), article_state([article], beam), beam,
                           max_steps, START, STOP, **kw)


def assert_matches_reference(res, tables, articles, beam, max_steps, **kw):
    ref_kw = {k: v for k, v in kw.items() if k != "compact_below"}
    if "repeat_exempt" in ref_kw:
        ref_kw["exempt"] = ref_kw.pop("repeat_exempt")
    for row, art in enumerate(articles):
        tokens, score = reference(tables, art, beam, max_steps, **ref_kw)
        n = int(res["length"][row])
        assert res["ids"][row, :n].tolist() == tokens, (row, art)
        assert not res["ids"][row, n:].any()
        np.testing.assert_allclose(res["score"][row], score, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("beam", [1, 2, 4])
@pytest.mark.parametrize("cov", [0.0, 0.7])
def test_beam_equals_see_reference_per_article(beam, cov):
    tables = make_articles(7, 6, 8, stop_bias=[-3, -1, 0, 1, 2, -2])
    articles = [0, 1, 2, 3, 4, 5]
    res = batched(tables, articles, beam, 8, min_steps=1, coverage_penalty=cov)
    assert len(set(res["length"].tolist())) >= 3  # the articles end at different lengths
    assert_matches_reference(res, tables, articles, beam, 8, min_steps=1, coverage_penalty=cov)


def test_gnmt_length_penalty_matches_the_reference():
    """Wu et al. (2016): finished hypotheses ranked by log p / ((5 + |Y|) / 6)^alpha, the
    the fallback live one too. It ranks lengths unlike the average log-prob: some articles
    get another summary."""
    tables = make_articles(13, 6, 9, stop_bias=[1, 0, 2, -1, 1, 0])
    articles = [0, 1, 2, 3, 4, 5]
    kw = dict(min_steps=1, coverage_penalty=0.3)
    plain = batched(tables, articles, 3, 9, **kw)
    res = batched(tables, articles, 3, 9, length_penalty=1.5, **kw)
    assert_matches_reference(res, tables, articles, 3, 9, length_penalty=1.5, **kw)
    assert (res["length"] != plain["length"]).any()


@pytest.mark.parametrize("graph,compact_below,row_buckets", [
    (False, 0.0, False), (False, 0.5, False), (False, 1.0, False), (True, 0.0, False),
    (True, 1.0, False), (False, 1.0, True), (True, 1.0, True)])
def test_an_article_result_does_not_depend_on_its_batch_mates(graph, compact_below, row_buckets):
    tables = make_articles(3, 6, 10, stop_bias=[3, -3, 0, 2, -1, 1])
    search = searcher(tables, 3, 10, graph=graph, compact_below=compact_below,
                      row_buckets=row_buckets)
    alone = search([2])
    for mates in ([2, 0], [1, 2, 5], [0, 1, 3, 4, 2], [2, 2, 4]):
        res = search(mates)
        for row in [i for i, a in enumerate(mates) if a == 2]:
            np.testing.assert_array_equal(res["ids"][row], alone["ids"][0])
            assert res["length"][row] == alone["length"][0]
            assert res["score"][row] == alone["score"][0]  # bit for bit


def once_step_fn(tables):
    """article_step_fn reading each article's id from the state's ONCE part, held once an
    article ([b]) and repeated to its rows here, as a model's step broadcasts it."""
    tiled = article_step_fn(tables)

    def step_fn(ids, step, state):
        held = state[ONCE]["article"]
        rows = tf.repeat(held, tf.shape(ids)[0] // tf.shape(held)[0])
        log_probs, new, extras = tiled(ids, step, {"sum": state["sum"],
                                                   ARTICLE: {"article": rows}})
        return log_probs, {"sum": new["sum"], ONCE: state[ONCE]}, extras

    return step_fn


@pytest.mark.parametrize("graph,compact_below,row_buckets", [
    (False, 0.0, False), (False, 1.0, False), (True, 1.0, False), (True, 1.0, True)])
def test_state_held_once_an_article_follows_its_articles(graph, compact_below, row_buckets):
    """A ONCE tensor ([b, ...], not tiled) goes through the first step, the reordering and the
    compaction as its article does: the same results as the same tensor tiled under ARTICLE."""
    tables = make_articles(5, 6, 10, stop_bias=[3, -3, 0, 2, -1, 1])
    kw = search_kw(5, 10, 3, src_len=L, compact_below=compact_below, row_buckets=row_buckets)
    arts = tf.constant([2, 0, 5, 1, 3], tf.int32)

    def run_once(a):
        state = {**tile_beams({"sum": tf.zeros_like(a)}, 3), ONCE: {"article": a}}
        return beam_search(once_step_fn(tables), state, **kw)

    if graph:
        run_once = tf.function(run_once, input_signature=[tf.TensorSpec([None], tf.int32)])
    held = {k: v.numpy() for k, v in run_once(arts).items()}
    tiled = batched(tables, [2, 0, 5, 1, 3], 3, 10, compact_below=compact_below,
                    row_buckets=row_buckets)
    assert len(set(tiled["length"].tolist())) > 1  # articles leave the batch at different steps
    for key in ("ids", "length", "score"):
        np.testing.assert_array_equal(held[key], tiled[key])


@pytest.mark.parametrize("beam", [2, 4])
def test_constraints_match_the_reference(beam):
    tables = make_articles(11, 5, 9, width=7, stop_bias=[-4, -2, -3, -1, -5])
    exempt = [False, False, True, False, False, False, True]  # ids 2 and 6: "punctuation"
    kw = dict(min_steps=3, unk_id=1, block_trigrams=True, repeat_exempt=exempt)
    res = batched(tables, [0, 1, 2, 3, 4], beam, 9, **kw)
    assert_matches_reference(res, tables, [0, 1, 2, 3, 4], beam, 9, **kw)
    for row in range(5):
        toks = res["ids"][row, : res["length"][row]].tolist()
        words = [t for t in toks if not exempt[t]]
        assert len(words) == len(set(words)) and 1 not in toks and len(toks) >= 3


def test_repeated_word_block_lets_punctuation_repeat():
    # A model that says "1 2 1 2 ..." and never stops; 2 is exempt (punctuation), 1 is a word.
    t = np.zeros((1, 6, W, 2, W), "float32")
    t[..., :] = np.log([0.01, 0.79, 0.2 - 1e-6, 1e-6])  # from [START] (id 0): 1
    t[:, :, 1, :, :] = np.log([0.01, 0.04, 0.95 - 1e-6, 1e-6])  # after 1: 2
    t[:, :, 2, :, :] = np.log([0.01, 0.6, 0.39 - 1e-6, 1e-6])  # after 2: 1, else 2
    attn = np.full((1, 6, W, 2, L), 1.0 / L, "float32")
    res = batched((t, attn), [0], 2, 6, repeat_exempt=[False, False, True, False])
    assert res["ids"][0].tolist() == [1, 2, 2, 2, 2, 2] and res["length"][0] == 6
    free = batched((t, attn), [0], 2, 6)
    assert free["ids"][0].tolist() == [1, 2, 1, 2, 1, 2]


def test_gnmt_coverage_penalty_numbers():
    cov = np.array([[0.5, 1.5, 0.0, 0.25], [1.0, 1.0, 0.0, 0.0]], "float32")
    got = gnmt_coverage_penalty(tf.constant(cov), 0.4).numpy()
    want = [0.4 * (np.log(0.5) + 0 + np.log(0.25)), 0.0]  # zero sums (padding) left out
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_coverage_penalty_changes_the_choice():
    # Two equally likely one-word summaries; the second spreads its attention over the source.
    t = np.full((1, 3, W, 2, W), np.log(1e-3), "float32")
    t[0, 0, START, 0, [1, 2]] = np.log(0.499)
    t[0, 1, :, :, STOP] = np.log(0.997)
    attn = np.full((1, 3, W, 2, L), 1.0 / L, "float32")
    attn[0, 1, 1] = [1.0, 0, 0, 0, 0]  # after token 1: all on position 0
    attn[0, 0, START] = [0, 0.25, 0.25, 0.25, 0.25]
    plain = batched((t, attn), [0], 2, 3)
    cp = batched((t, attn), [0], 2, 3, coverage_penalty=1.0)
    assert plain["ids"][0, 0] == 1 and cp["ids"][0, 0] == 2
    want = (np.log(0.499) + np.log(0.997)) / 3 + np.log(0.2) + 4 * np.log(0.45)
    np.testing.assert_allclose(cp["score"][0], want, rtol=1e-5)


def markov_tables(seed, steps, width, window):
    """A model whose next-token distribution depends only on the last `window` tokens (the
    state ABS has), as per-step tables indexed by the window's ids."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=1.5, size=(steps,) + (width,) * (window + 1))
    return (logits - np.log(np.exp(logits).sum(-1, keepdims=True))).astype("float32")


def markov_step_fn(table, window):
    table = tf.constant(table)

    def step_fn(ids, step, state):
        ctx = tf.concat([state["ctx"][:, 1:], ids[:, None]], axis=1)  # the last `window` ids
        idx = tf.concat([tf.fill([tf.shape(ids)[0], 1], step), ctx], axis=1)
        return tf.gather_nd(table, idx), {"ctx": ctx}, {}

    return step_fn


def markov_score(table, seq, window):
    ctx, s = [START] * window, 0.0
    for t, tok in enumerate(seq):
        s += table[(t,) + tuple(ctx) + (tok,)]
        ctx = ctx[1:] + [tok]
    return s


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("window", [1, 2])
def test_fixed_length_with_recombination_is_exact_on_a_markov_model(seed, window):
    width, n = 4, 5  # tokens 0-2 and [STOP] (never emitted); 3^5 = 243 sequences
    table = markov_tables(seed, n, width, window)
    beam = 3 ** window  # one hypothesis per distinct window: recombination makes it Viterbi
    state = tile_beams({"ctx": tf.fill([2, window], START)}, beam)
    res = beam_search(markov_step_fn(table, window), state,
                      **search_kw(2, n, beam, min_steps=n, recombine_window=window))
    best = max(itertools.product(range(3), repeat=n),
               key=lambda s: markov_score(table, s, window))
    for b in range(2):
        assert res["length"].numpy()[b] == n  # exactly N words, no [STOP]
        assert res["ids"].numpy()[b].tolist() == list(best)
        np.testing.assert_allclose(res["score"].numpy()[b],
                                   markov_score(table, best, window) / (n + 1), rtol=1e-5)


def test_recombination_matches_the_reference():
    table = markov_tables(5, 6, 5, 2)
    state = tile_beams({"ctx": tf.fill([1, 2], START)}, 3)
    fn = markov_step_fn(table, 2)
    res = beam_search(fn, state, **search_kw(1, 6, 3, min_steps=6, recombine_window=2))
    tokens, score = see_beam_search(fn, state, 3, 6, START, STOP, min_steps=6,
                                    recombine_window=2)
    assert res["ids"].numpy()[0].tolist() == tokens
    np.testing.assert_allclose(res["score"].numpy()[0], score, rtol=1e-6)


def test_next_power_of_two():
    n = [0, 1, 2, 3, 4, 5, 7, 8, 9, 63, 64, 65, 1000, 2**20 + 1]
    want = [1, 1, 2, 4, 4, 8, 8, 8, 16, 64, 64, 128, 1024, 2**21]
    assert next_power_of_two(tf.constant(n)).numpy().tolist() == want


def test_row_buckets_shrink_the_batch_to_powers_of_two_with_the_same_results():
    """decode.jit_step's compaction: the step sees powers of two of articles (times K) only,
    finished articles padding the batch up to one, and every article's result is the one the
    exact compaction gives."""
    tables = make_articles(9, 7, 10, stop_bias=[3, -3, 0, 2, -1, 1, -2])
    articles, beam = list(range(7)), 3
    exact = batched(tables, articles, beam, 10)
    inner, rows = article_step_fn(tables), []

    def step_fn(ids, step, state):  # eager: the loop runs in Python and shapes are concrete
        rows.append(int(ids.shape[0]))
        return inner(ids, step, state)

    res = beam_search(step_fn, article_state(articles, beam),
                      **search_kw(len(articles), 10, beam, src_len=L, row_buckets=True))
    assert len(set(exact["length"].tolist())) >= 3  # articles finish at different steps
    for k in ("ids", "length", "score"):
        np.testing.assert_array_equal(res[k].numpy(), exact[k])
    assert rows[0] == 7  # the first step: one row an article
    sizes = [r // beam for r in rows[1:]]
    assert all(r % beam == 0 for r in rows[1:]) and sizes[0] == 7
    assert all(n == 7 or n & (n - 1) == 0 for n in sizes) and min(sizes) < 7  # it shrank
    assert sizes == sorted(sizes, reverse=True)


def test_extras_and_src_pos_follow_the_best_hypothesis_after_compaction():
    tables = make_articles(5, 4, 7, stop_bias=[2, -2, 0, 1])
    res = batched(tables, [0, 1, 2, 3], 3, 7, return_extras=("attn", "p_gen", "src_pos"))
    for row in range(4):
        n = int(res["length"][row])
        toks = res["ids"][row, :n].tolist()
        total, prev = 0, START
        for t, tok in enumerate(toks):  # replay the fake model along the chosen tokens
            want = tables[1][row, t, prev, total % 2]
            np.testing.assert_allclose(res["attn"][row, t], want, rtol=1e-6)
            assert res["src_pos"][row, t] == want.argmax()
            assert res["p_gen"][row, t] == total % 3
            total, prev = total + prev, tok
        assert not res["attn"][row, n:].any() and not res["src_pos"][row, n:].any()


@pytest.mark.parametrize("width,beam,pool", [(1000, 4, 8), (97, 3, 9), (5, 4, 8), (4, 4, 16),
                                             (64, 4, 8)])
def test_top_candidates_equal_a_full_top_k(width, beam, pool):
    rng = np.random.default_rng(width)
    b = 3
    lp = rng.normal(scale=4.0, size=(b * beam, width)).astype("float32")
    lp[0, :] = NEG_INF  # a row with nothing allowed
    alive = rng.normal(size=(b, beam)).astype("float32")
    alive[1, 1:] = NEG_INF  # dead beams
    scores, bm, tok = top_candidates(tf.constant(lp), tf.constant(alive), pool, chunk=16)
    full = (alive[:, :, None] + lp.reshape(b, beam, width)).reshape(b, -1)
    k = min(pool, beam * min(pool, width))
    want_scores, want_idx = tf.math.top_k(full, k)
    np.testing.assert_array_equal(scores.numpy(), want_scores.numpy())
    valid = want_scores.numpy() > NEG_INF / 2  # the order of equal invalid entries is free
    np.testing.assert_array_equal((bm.numpy() * width + tok.numpy())[valid],
                                  want_idx.numpy()[valid])


def test_first_step_runs_one_row_an_article_and_gives_the_same_result():
    """Step 0 starts the K beams from one state: it runs on B rows (not B*K), the later steps on
    the B*K hypotheses; the result is the reference's either way."""
    tables = make_articles(5, 4, 6, stop_bias=[-2, 0, 1, -1])
    step_fn = article_step_fn(tables)
    rows = []

    def counting(ids, step, state):
        rows.append((int(step), int(tf.shape(ids)[0])))
        return step_fn(ids, step, state)

    articles, beam = [0, 1, 2, 3], 3
    res = beam_search(counting, article_state(articles, beam),
                      **search_kw(4, 6, beam, src_len=L, min_steps=2, compact_below=0.0))
    assert rows[0] == (0, 4) and rows[1] == (1, 12)
    res = {k: v.numpy() for k, v in res.items()}
    assert_matches_reference(res, tables, articles, beam, 6, min_steps=2)


@pytest.mark.parametrize("batch,max_steps", [(0, 5), (2, 0)])
def test_an_empty_batch_or_no_steps_decodes_nothing(batch, max_steps):
    tables = make_articles(5, 4, 6)
    res = beam_search(article_step_fn(tables), article_state(list(range(batch)), 3),
                      **search_kw(batch, max_steps, 3, src_len=L))
    assert res["ids"].shape == (batch, max_steps)
    assert not res["length"].numpy().any() and not res["ids"].numpy().any()


def random_mixture(rng, n, vocab, src_len, oovs):
    """A pointer distribution in parts with repeated source ids, OOV ids and padding."""
    logits = rng.normal(scale=3.0, size=(n, vocab))
    lengths = rng.integers(1, src_len + 1, size=n)
    lengths[0] = src_len
    mask = np.arange(src_len)[None, :] < lengths[:, None]
    ids = rng.integers(0, vocab + oovs, size=(n, src_len))
    ids[:, 1] = ids[:, 0]  # a repeated id in every row
    ids[~mask] = 0  # padding holds PAD
    attn = np.where(mask, np.exp(rng.normal(size=(n, src_len))), 0.0)
    attn /= attn.sum(-1, keepdims=True)
    ext = tf.constant(ids, tf.int32)
    slot, first = copy_slots(ext, tf.constant(mask))
    return Mixture(logits=tf.constant(logits, tf.float32),
                   p_gen=tf.constant(rng.uniform(0.05, 0.95, size=n), tf.float32),
                   attn=tf.constant(attn, tf.float32), ext_ids=ext, slot=slot, first=first,
                   width=tf.constant(vocab + oovs))


def test_copy_slots_point_at_the_first_real_position_of_each_id():
    ext = tf.constant([[5, 7, 5, 9, 7, 0], [3, 3, 3, 0, 0, 0]])
    mask = tf.constant([[True] * 5 + [False], [True] * 3 + [False] * 3])
    slot, first = copy_slots(ext, mask)
    assert slot.numpy().tolist() == [[0, 1, 0, 3, 1, 5], [0, 0, 0, 3, 4, 5]]
    assert first.numpy().tolist() == [[True, True, False, True, False, False],
                                      [True, False, False, False, False, False]]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("bans", ["none", "all"])
def test_mixture_candidates_equal_the_dense_distribution(seed, bans):
    """The search over a Mixture's parts picks what the search over the whole extended
    vocabulary picks: the same scores, hypotheses and tokens, the constraints included."""
    rng = np.random.default_rng(seed)
    b, beam, vocab, src_len, oovs, steps = 3, 4, 60, 9, 4, 6
    n = b * beam
    mix = random_mixture(rng, n, vocab, src_len, oovs)
    seq = rng.integers(0, vocab + oovs, size=(n, steps)).astype("int32")
    seq[:, :3] = mix.ext_ids.numpy()[:, :3]  # emitted source words (some of them OOVs)
    kw = dict(min_steps=0)
    if bans == "all":
        exempt = np.zeros(vocab, bool)
        exempt[:10] = True
        kw = dict(min_steps=9, unk_id=1, block_trigrams=True, repeat_exempt=tf.constant(exempt))
    step = tf.constant(4)
    alive = rng.normal(size=(b, beam)).astype("float32")
    alive[2, 2:] = NEG_INF  # dead beams
    constraints = Constraints(STOP, **kw)
    got, valid, dense = assert_candidates_match_dense(mix, constraints, seq, step, alive,
                                                      2 * beam)
    assert valid.sum() > b  # something is allowed
    if bans == "all":  # every banned token stays out of the valid candidates
        dense_np = dense.numpy()
        rows = got[1].numpy() + np.arange(b)[:, None] * beam
        assert (dense_np[rows, got[2].numpy()][valid] > NEG_INF / 2).all()


def mixture_step_fn(tables, ext_ids, mask, vocab, oovs, dense):
    """A pointer 'model' from fixed tables (the next-token logits and attention depend on the
    step, the previous token and the parity of the state), returning its distribution as a
    Mixture, or dense."""
    logits, attn = tf.constant(tables[0]), tf.constant(tables[1])
    slot, first = copy_slots(ext_ids, mask)

    def step_fn(ids, step, state):
        art = state[ARTICLE]["article"]
        prev = tf.minimum(ids, vocab - 1)
        idx = tf.stack([art, tf.fill(tf.shape(ids), step), prev, state["sum"] % 2], axis=1)
        rows = tf.gather(ext_ids, art)
        a = tf.nn.softmax(tf.where(tf.gather(mask, art), tf.gather_nd(attn, idx), -1e9))
        mix = Mixture(logits=tf.gather_nd(logits, idx),
                      p_gen=tf.sigmoid(tf.cast(state["sum"] % 5 - 2, tf.float32)), attn=a,
                      ext_ids=rows, slot=tf.gather(slot, art), first=tf.gather(first, art),
                      width=tf.constant(vocab + oovs))
        out = dense_distribution(mix) if dense else mix
        return out, {"sum": state["sum"] + ids, ARTICLE: state[ARTICLE]}, {"attn": a}

    return step_fn


@pytest.mark.parametrize("beam", [1, 3])
@pytest.mark.parametrize("constraints", [False, True])
def test_beam_search_on_a_mixture_equals_it_on_the_dense_distribution(beam, constraints):
    rng = np.random.default_rng(beam)
    n_art, steps, vocab, oovs, src_len = 5, 7, 30, 3, 8
    logits = rng.normal(scale=2.0, size=(n_art, steps, vocab, 2, vocab)).astype("float32")
    logits[..., STOP] -= 1.5
    attn = rng.normal(size=(n_art, steps, vocab, 2, src_len)).astype("float32")
    ids = rng.integers(4, vocab + oovs, size=(n_art, src_len)).astype("int32")
    ids[:, 2] = ids[:, 5]
    lengths = np.array([8, 5, 8, 3, 6])
    mask = np.arange(src_len)[None, :] < lengths[:, None]
    ids[~mask] = 0
    exempt = np.zeros(vocab, bool)
    exempt[4:8] = True
    kw = (dict(min_steps=2, unk_id=1, block_trigrams=True, repeat_exempt=exempt)
          if constraints else {})
    out = {}
    for dense in (True, False):
        fn = mixture_step_fn((logits, attn), tf.constant(ids), tf.constant(mask), vocab, oovs,
                             dense)
        state = article_state(list(range(n_art)), beam)
        res = beam_search(fn, state, **search_kw(n_art, steps, beam, src_len=src_len,
                                                 return_extras=("src_pos",), **kw))
        out[dense] = {k: v.numpy() for k, v in res.items()}
    for k in ("ids", "length", "src_pos"):
        np.testing.assert_array_equal(out[False][k], out[True][k])
    np.testing.assert_allclose(out[False]["score"], out[True]["score"], rtol=1e-5)
    assert (out[True]["ids"] >= vocab).any() or constraints  # some copies of OOVs


@pytest.mark.parametrize("content_only", [False, True])
def test_the_repeated_word_block_exempts_function_words_only_when_asked(content_only):
    """decode.block_content_words_only: "for" may repeat, "game" may not; punctuation and the
    special tokens are exempt either way."""
    from pgn_tf import config as config_lib
    from pgn_tf.decoding.search import Search

    cfg = config_lib.Config()
    cfg.decode.block_repeated_words = True
    cfg.decode.block_content_words_only = content_only
    words = ["[PAD]", "[UNK]", "[START]", "[STOP]", "game", "for", "the", ",", "2048"]
    exempt = Search.from_params(cfg, words=words).constraints.repeat_exempt.numpy().tolist()
    assert exempt == [True] * 4 + [False, content_only, content_only, True, False]
