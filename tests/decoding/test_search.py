"""Searches scripted with a fake step function built from fixed log-probability tables."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from pgn_tf.decoding import greedy, sampling
from pgn_tf.decoding.beam_search import beam_search, constrain, tile_beams

W, STOP, START = 4, 3, 0  # tokens 0, 1, 2 and [STOP]; [START] reuses id 0 as the first input


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
            s = score_of(table, seq) / len(seq)
            if s > best:
                best, best_seq = s, list(body)
    return best_seq, best


def run_beam(table, batch, beam, max_steps, **kw):
    state = tile_beams({"sum": tf.zeros([batch], tf.int32)}, beam)
    return beam_search(fake_step_fn(table), state, batch, beam, max_steps, START, STOP, **kw)


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
    g = greedy.search(fake_step_fn(table), {"sum": tf.zeros([3], tf.int32)}, 3, 6, START, STOP)
    np.testing.assert_array_equal(beam["ids"].numpy(), g["ids"].numpy())
    np.testing.assert_array_equal(beam["length"].numpy(), g["length"].numpy())


def test_beam_finds_better_than_greedy_on_a_trap():
    # step 0: token 1 looks best (0.6) but leads to a flat distribution; token 2 (0.4) leads
    # to a certain STOP. Greedy takes 1, a beam of 2 finds 2 -> STOP.
    t = np.full((3, W, 2, W), np.log(0.25), "float32")
    t[0, START, 0] = np.log([1e-6, 0.6, 0.4 - 2e-6, 1e-6])
    t[1, 2, :] = np.log([1e-6, 1e-6, 1e-6, 1 - 3e-6])
    g = greedy.search(fake_step_fn(t), {"sum": tf.zeros([1], tf.int32)}, 1, 3, START, STOP)
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
    out = constrain(lp, tf.zeros([2, 4], tf.int32), tf.constant(1), stop_id=3, min_steps=2,
                    unk_id=1).numpy()
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
    res = sampling.search(fake_step_fn(table), {"sum": tf.zeros([64], tf.int32)}, 64, 6,
                          START, STOP, seed=1)
    lengths = res["length"].numpy()
    assert len(set(map(tuple, res["ids"].numpy().tolist()))) > 3  # not all the same
    assert np.all(res["step_log_probs"].numpy() <= 0) and np.all(lengths <= 6)
