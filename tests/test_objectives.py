"""The objectives against NumPy references on toy batches, and for every model."""

import numpy as np
import pytest
import tensorflow as tf

from pgn_tf import objectives
from pgn_tf.decoding.constraints import Constraints
from pgn_tf.models.abs import ABS
from pgn_tf.models.deep_reinforced import DeepReinforced
from pgn_tf.models.pointer_generator import PointerGenerator
from pgn_tf.vocab import STOP_ID, UNK_ID

B, L, T, V = 3, 7, 5, 20


def features(seed=0, pointer=True):
    rng = np.random.default_rng(seed)
    ext = np.where(rng.random((B, L)) < 0.3, V, rng.integers(4, V, (B, L)))
    target = rng.integers(4, V + 1, (B, T)) if pointer else rng.integers(4, V, (B, T))
    target[0, 1] = V  # an article OOV in the summary: copied
    ext[0, 2] = ext[0, 4] = V
    return {
        "enc_ids": tf.constant(np.where(ext >= V, UNK_ID, ext), tf.int32),
        "enc_ext_ids": tf.constant(ext, tf.int32),
        "enc_len": tf.constant([7, 5, 0]),
        "num_oovs": tf.constant([1, 1, 0]),
        "dec_input": tf.constant(rng.integers(4, V, (B, T)), tf.int32),
        "target": tf.constant(target, tf.int32),
        "dec_len": tf.constant([5, 3, 1]),
    }


def test_sequence_nll_mean_and_sum_match_numpy_and_mask_padding():
    lp = np.log(np.array([[0.5, 0.25, 0.1], [0.5, 1e-3, 1e-3], [0.9, 0.9, 0.9]], "float32"))
    n = np.array([2, 0, 3])
    sums = [-(lp[i, :k].sum()) for i, k in enumerate(n)]
    got_sum = objectives.sequence_nll(lp, n, "sum").numpy()
    got_mean = objectives.sequence_nll(lp, n, "mean").numpy()
    np.testing.assert_allclose(got_sum, sums, rtol=1e-6)
    np.testing.assert_allclose(got_mean, [sums[0] / 2, 0.0, sums[2] / 3], rtol=1e-6)
    with pytest.raises(ValueError, match="reduction"):
        objectives.sequence_nll(lp, n, "max")


def test_coverage_term_matches_numpy():
    rng = np.random.default_rng(3)
    attn = rng.dirichlet(np.ones(4), size=(2, 3)).astype("float32")  # [B, T, L]
    coverage = np.concatenate([np.zeros((2, 1, 4)), np.cumsum(attn, 1)[:, :-1]], 1)
    lengths = np.array([3, 2])
    ref = [np.mean([np.minimum(attn[b, t], coverage[b, t]).sum() for t in range(n)])
           for b, n in enumerate(lengths)]
    got = objectives.coverage_term(attn, coverage.astype("float32"), lengths).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-6)
    assert np.all(got <= 1.0)  # covloss_t <= sum_i a_i = 1 (See et al. section 2.3)


def test_switch_supervision_matches_numpy():
    """u* = 1 (copy from the first occurrence) exactly for OOV targets, u* = 0 otherwise."""
    rng = np.random.default_rng(5)
    f = features(5)
    logits = rng.normal(size=(B, T, V)).astype("float32")
    attn = rng.dirichlet(np.ones(L), size=(B, T)).astype("float32")
    z = rng.normal(size=(B, T)).astype("float32")
    got = objectives.switch_supervised_log_probs(
        {"logits": logits, "attn": attn, "p_gen_logit": z}, f, V).numpy()
    ext, tgt = f["enc_ext_ids"].numpy(), f["target"].numpy()
    sig = 1 / (1 + np.exp(-z))
    for b in range(B):
        for t in range(T):
            y = tgt[b, t]
            if y < V:
                p = np.exp(logits[b, t]) / np.exp(logits[b, t]).sum()
                want = np.log(sig[b, t]) + np.log(p[y])
            else:
                hits = np.flatnonzero(ext[b] == y)
                want = (np.log(1 - sig[b, t]) + np.log(attn[b, t, hits[0]])) if len(hits) \
                    else -1e30
            if want < -1e20:
                assert got[b, t] < -1e20
            else:
                np.testing.assert_allclose(got[b, t], want, rtol=1e-5, atol=1e-5)
    assert tgt[0, 1] == V and got[0, 1] > -1e20  # the copied OOV is supervised as a copy


def test_reference_ids_drop_stop_and_unk():
    target = tf.constant([[5, UNK_ID, STOP_ID, 0], [6, 7, 8, 9]])
    ref, n = objectives.reference_ids(target, tf.constant([3, 4]))  # second one was cut
    assert n.numpy().tolist() == [2, 4] and ref.numpy()[0, 1] == -1


def test_reward_replaces_unk_with_the_attended_source_word_as_decoding_does():
    f = features(5)
    ext, target = f["enc_ext_ids"].numpy(), f["target"].numpy()
    # article 0: [UNK] at step 1 attended position 2 (an article OOV, extended id V = the
    # reference's copied word); article 1: [UNK] attended position 6, past its 5 words (no
    # word there: stays [UNK]); article 2: empty article.
    ids = np.array([[target[0, 0], UNK_ID, 0, 0, 0],
                    [target[1, 0], UNK_ID, target[1, 2], 0, 0],
                    [UNK_ID, 0, 0, 0, 0]], np.int32)
    src_pos = np.array([[4, 2, 0, 0, 0], [1, 6, 3, 0, 0], [0, 0, 0, 0, 0]], np.int32)
    result = {"ids": tf.constant(ids), "length": tf.constant([2, 3, 1]),
              "src_pos": tf.constant(src_pos)}
    got = objectives.replace_unk_ids(result, f).numpy()
    want = ids.copy()
    want[0, 1] = ext[0, 2]
    assert ext[0, 2] == V == target[0, 1]
    np.testing.assert_array_equal(got, want)
    plain = objectives.rouge_l_reward(result, f).numpy()
    replaced = objectives.rouge_l_reward(result, f, replace_unk=True).numpy()
    # article 0: 1 of its 2 tokens is in the reference without the replacement, 2 with it
    ref_len = int(objectives.reference_ids(f["target"], f["dec_len"])[1][0])
    f1 = lambda m, n, r: 2 * m / (n + r)  # noqa: E731  (LCS m, lengths n and r)
    np.testing.assert_allclose([plain[0], replaced[0]], [f1(1, 2, ref_len), f1(2, 2, ref_len)],
                               rtol=1e-6)
    np.testing.assert_allclose(replaced[1:], plain[1:])


def test_build_replaces_unk_in_the_reward_where_decoding_does():
    from pgn_tf import config

    cfg = config.preset("debian_coverage")  # a corpus preset: this project's replace_unk
    cfg.train.objective = "mixed"
    assert objectives.build(cfg).replace_unk
    for key, value in (("train.reward_replace_unk", False), ("decode.replace_unk", False),
                       ("decode.avoid_unk", True)):
        section, name = key.split(".")
        off = config.preset("debian_coverage")
        off.train.objective = "mixed"
        setattr(getattr(off, section), name, value)
        assert not objectives.build(off).replace_unk, key
    bow = config.resolve("debian_abs", ["model.abs_encoder=bow", "train.objective=mixed"])
    assert not objectives.build(bow).replace_unk  # no attention to read a source word from
    # the papers' presets: neither decoding nor the reward replaces [UNK] (none of the papers
    # does)
    for name in ("see2017_coverage", "paulus2017", "rush2015_abs"):
        paper = config.resolve(name, ["train.objective=mixed"])
        assert not objectives.build(paper).replace_unk, name


def teacher_forced_batch(f: dict, sampled: dict, steps: int) -> dict:
    """f with the sampled sequence as its summary, for teacher forcing over y^s: inputs
    [START] y_1 .., targets y_1 .. [STOP] (when the sample stopped within `steps`); f has a row
    for each sampled one."""
    ids, n = sampled["ids"].numpy(), sampled["length"].numpy()
    rows = len(n)
    stopped = sampled["step_log_probs"].numpy()[np.arange(rows), np.minimum(n, steps - 1)] != 0
    tgt = np.zeros((rows, steps), np.int32)
    for i in range(rows):
        tgt[i, : n[i]] = ids[i, : n[i]]
        if stopped[i] and n[i] < steps:
            tgt[i, n[i]] = STOP_ID
    dec_len = (n + (stopped & (n < steps))).astype(np.int32)
    dec_in = np.concatenate([np.full((rows, 1), 2), tgt[:, :-1]], 1)
    return dict(f, dec_input=tf.constant(dec_in), target=tf.constant(tgt),
                dec_len=tf.constant(dec_len))


@pytest.mark.parametrize("make", [
    lambda: PointerGenerator(V, 6, 4, coverage=True),
    lambda: DeepReinforced(V, hidden_dim=4, emb_dim=3, sample_replace_prob=0.0),
])
def test_self_critical_term_equals_advantage_times_teacher_forced_log_prob(make):
    """Paulus et al. eq. 15: (r(y^) - r(y^s)) * sum_t log p(y^s_t), with log p(y^s) recomputed
    by teacher forcing on the sampled sequence; works for any model (coverage included)."""
    tf.random.set_seed(7)
    model = make()
    f = features(1)
    sc = objectives.SelfCritical(objectives.MaximumLikelihood(), gamma=0.9, max_steps=6)
    enc, state = sc._encode(model, f)
    from pgn_tf.decoding import sampling

    sampled = sampling.search(sc._step_fn(model, enc), state, batch_size=B, max_steps=6,
                              start_id=2, constraints=Constraints(STOP_ID), seed=3)
    tf_batch = teacher_forced_batch(f, sampled, 6)
    dec_len = tf_batch["dec_len"]
    tf_log_p = objectives.sequence_nll(
        model.token_log_probs(tf_batch, model(tf_batch, training=False)), dec_len, "sum")
    np.testing.assert_allclose(-tf_log_p.numpy(), sampled["step_log_probs"].numpy().sum(1),
                               rtol=1e-4, atol=1e-4)
    r_s = objectives.rouge_l_reward(sampled, f).numpy()
    r_g = np.array([0.3, 0.0, 0.5], np.float32)
    term = objectives.self_critical_term(-tf_log_p, tf.constant(r_s), tf.constant(r_g)).numpy()
    np.testing.assert_allclose(term, (r_g - r_s) * -tf_log_p.numpy(), rtol=1e-6)


def test_leave_one_out_baseline_is_the_mean_of_the_other_samples():
    rng = np.random.default_rng(4)
    for k in (2, 3, 5):
        r = rng.random((4, k)).astype(np.float32)
        want = np.array([[np.delete(row, j).mean() for j in range(k)] for row in r])
        np.testing.assert_allclose(objectives.leave_one_out_baseline(tf.constant(r)).numpy(),
                                   want, rtol=1e-6)
    # two samples: each is the other's baseline, so their advantages cancel
    r = tf.constant([[0.2, 0.6]])
    np.testing.assert_allclose(objectives.leave_one_out_baseline(r).numpy(), [[0.6, 0.2]])
    with pytest.raises(ValueError, match="samples"):
        objectives.SelfCritical(objectives.MaximumLikelihood(), 0.9, 6, samples=0)


K = 3


@pytest.mark.parametrize("make", [
    lambda: PointerGenerator(V, 6, 4, coverage=True),
    lambda: DeepReinforced(V, hidden_dim=4, emb_dim=3, emb_init_std=0.5,
                           sample_replace_prob=0.0),
], ids=["pointer_generator_coverage", "deep_reinforced"])
def test_k_samples_an_article_come_from_that_articles_encoding(make):
    """train.rl_samples = K: row i * K + j of the samples is the j-th of article i: its
    log-probability, and that log-probability's gradient for every variable, are those of
    teacher forcing the sample on article i (through the tiled encoding, whose gradient sums
    over the copies), and its reward reads article i's reference."""
    tf.random.set_seed(7)
    model = make()
    f = features(1)
    sc = objectives.SelfCritical(objectives.MaximumLikelihood(), gamma=0.9, max_steps=6,
                                 seed=3, samples=K)
    with tf.GradientTape() as tape:
        sampled, on = sc.sample(model, f)
        total = tf.reduce_sum(sampled["step_log_probs"])
    through_search = tape.gradient(total, model.trainable_variables)
    assert sampled["ids"].shape[0] == B * K
    rows = np.repeat(np.arange(B), K)  # the article of each sampled row
    repeated = {key: tf.gather(v, rows) for key, v in f.items()}
    for key in ("target", "dec_len", "enc_ext_ids"):
        np.testing.assert_array_equal(on[key].numpy(), repeated[key].numpy())
    batch = teacher_forced_batch(repeated, sampled, 6)
    with tf.GradientTape() as tape:
        log_p = -objectives.sequence_nll(model.token_log_probs(batch, model(batch)),
                                         batch["dec_len"], "sum")
        total_tf = tf.reduce_sum(log_p)
    np.testing.assert_allclose(log_p.numpy(), sampled["step_log_probs"].numpy().sum(1),
                               rtol=1e-4, atol=1e-4)
    forced = tape.gradient(total_tf, model.trainable_variables)
    for var, a, c in zip(model.trainable_variables, through_search, forced):
        a, c = tf.convert_to_tensor(a).numpy(), tf.convert_to_tensor(c).numpy()
        np.testing.assert_allclose(a, c, rtol=1e-3, atol=1e-6, err_msg=var.path)


def test_k_samples_score_each_against_the_others_mean():
    """rl_terms with K samples an article: eq. 15's term is the mean over the article's samples
    of (leave-one-out baseline - reward) * log p, and the reward diagnostics are means over
    them; the greedy reward is still the greedy output's."""
    model = PointerGenerator(V, 6, 4, coverage=True)
    f = features(2)
    sc = objectives.SelfCritical(objectives.MaximumLikelihood(), gamma=0.5, max_steps=6,
                                 seed=5, samples=K)
    tf.random.set_seed(11)
    sampled, on = sc.sample(model, f)
    tf.random.set_seed(11)  # the same draws again (the greedy search draws nothing)
    terms = sc.rl_terms(model, f)
    r = objectives.rouge_l_reward(sampled, on).numpy().reshape(B, K)
    log_p = sampled["step_log_probs"].numpy().sum(1).reshape(B, K)
    base = (r.sum(1, keepdims=True) - r) / (K - 1)
    assert np.abs(base - r).max() > 0  # samples that give the term a signal
    np.testing.assert_allclose(terms["reward_sample"].numpy(), r.mean(1), rtol=1e-6)
    np.testing.assert_allclose(terms["rl"].numpy(), ((base - r) * log_p).mean(1), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(terms["advantage_abs"].numpy(), np.abs(base - r).mean(1),
                               rtol=1e-5, atol=1e-7)
    greedy_r = objectives.rouge_l_reward(sc.greedy_search(model, f), f).numpy()
    np.testing.assert_allclose(terms["reward_greedy"].numpy(), greedy_r)
    assert all(terms[k].shape == (B,) for k in sc.term_names(model) if k != "p_gen_mean"
               and k in terms)


def test_mixed_objective_mixes_and_reports_for_a_coverage_model():
    tf.random.set_seed(0)
    model = PointerGenerator(V, 6, 4, coverage=True)
    f = features(2)
    ml = objectives.MaximumLikelihood(coverage_weight=1.0)
    sc = objectives.SelfCritical(ml, gamma=0.75, max_steps=6, min_steps=2)
    with tf.GradientTape() as tape:
        terms = sc(model, f, training=True)
        loss = tf.reduce_mean(terms["total"])
    want = 0.75 * terms["rl"] + 0.25 * (terms["nll"] + terms["coverage"])
    np.testing.assert_allclose(terms["total"].numpy(), want.numpy(), rtol=1e-6)
    assert set(sc.term_names(model)) <= set(terms)
    r = terms["reward_sample"].numpy()
    assert r.shape == (B,) and np.all((r >= 0) & (r <= 1))
    grads = tape.gradient(loss, model.trainable_variables)
    assert all(g is not None for g in grads)


def test_rl_searches_run_to_the_decode_limits_not_the_reference_length():
    """The sampled and greedy sequences run to max_steps (the decode config's), whatever the
    length of the batch's references; [STOP] is barred before min_steps."""
    model = DeepReinforced(V, hidden_dim=4, emb_dim=3)
    f = features(3)  # references of at most T = 5 tokens
    sc = objectives.SelfCritical(objectives.MaximumLikelihood("sum"), 0.99, max_steps=9,
                                 min_steps=9)
    terms = sc.rl_terms(model, f)
    np.testing.assert_array_equal(terms["sample_capped"].numpy(), 1.0)


def test_build_picks_the_configured_objective():
    from pgn_tf import config

    cfg = config.preset("paulus2017")
    obj = objectives.build(cfg)
    assert isinstance(obj, objectives.MaximumLikelihood) and obj.reduction == "sum"
    assert obj.pointer_supervision
    cfg.train.objective = "mixed"
    obj = objectives.build(cfg)
    assert isinstance(obj, objectives.SelfCritical) and obj.gamma == cfg.train.rl_gamma
    assert obj.max_steps == cfg.decode.max_dec_steps and obj.min_steps == cfg.decode.min_dec_steps
    assert obj.samples == 1  # Paulus et al.: one sample against the greedy output
    cfg.train.objective = "rl"
    cfg.train.rl_samples = 4
    assert objectives.build(cfg).gamma == 1.0 and objectives.build(cfg).samples == 4


def test_abs_trains_through_the_same_objective():
    model = ABS(V, hidden_dim=6, emb_dim=4, window=3)
    f = features(4, pointer=False)
    terms = objectives.MaximumLikelihood("sum")(model, f)
    log_p = model.token_log_probs(f, model(f))
    want = -np.sum(log_p.numpy() * (np.arange(T)[None] < f["dec_len"].numpy()[:, None]), 1)
    np.testing.assert_allclose(terms["total"].numpy(), want, rtol=1e-5)


@pytest.mark.parametrize("make", [
    lambda: DeepReinforced(V, hidden_dim=4, emb_dim=3, emb_init_std=0.5),
    lambda: PointerGenerator(V, 6, 4, coverage=True),
], ids=["deep_reinforced", "pointer_generator_coverage"])
def test_the_policy_gradient_equals_the_teacher_forced_gradient(make):
    """The gradient the self-critical term takes through the sampling loop is the gradient of
    sum_t log p(y^s_t) recomputed by teacher forcing on the sample (Paulus et al. eq. 15), for
    every variable: the search's state, copy and coverage carry no stray gradient path."""
    tf.random.set_seed(7)
    model = make()
    f = features(1)
    sc = objectives.SelfCritical(objectives.MaximumLikelihood(), gamma=0.9, max_steps=6)
    from pgn_tf.decoding import sampling

    with tf.GradientTape() as tape:
        enc, state = sc._encode(model, f)
        sampled = sampling.search(sc._step_fn(model, enc), state, batch_size=B, max_steps=6,
                                  start_id=2, constraints=Constraints(STOP_ID), seed=3,
                                  return_stats=True)
        total = tf.reduce_sum(sampled["step_log_probs"])
    through_search = tape.gradient(total, model.trainable_variables)
    batch = teacher_forced_batch(f, sampled, 6)
    with tf.GradientTape() as tape:
        log_p = model.token_log_probs(batch, model(batch, training=False))
        total_tf = -tf.reduce_sum(objectives.sequence_nll(log_p, batch["dec_len"], "sum"))
    forced = tape.gradient(total_tf, model.trainable_variables)
    for var, a, c in zip(model.trainable_variables, through_search, forced):
        a, c = tf.convert_to_tensor(a).numpy(), tf.convert_to_tensor(c).numpy()
        np.testing.assert_allclose(a, c, rtol=1e-3, atol=1e-6, err_msg=var.path)
    # the diagnostics: entropies of distributions over V + max_oovs, p_gen a probability
    ent, p_gen = sampled["entropy"].numpy(), sampled["p_gen"].numpy()
    assert np.all((ent > 0) & (ent <= np.log(V + 1) + 1e-4)) and np.all((p_gen > 0) & (p_gen < 1))
