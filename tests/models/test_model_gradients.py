"""The assembled models' gradients with model.rnn_impl = "fused" (the written-out loops and
gradients of pgn_tf.ops) against plain autodiff through the "keras" path (the Keras layers),
for every model and every objective, on one batch with padding, an empty article and article
OOVs copied into the summary: the loss and the gradient of every variable agree.

The layer tests pin each fused piece against autodiff of that piece; these pin their assembly
(which loop output is handed to which gradient), where a wrong input still gives a plausible
gradient: GateGradient given h_t instead of h_{t-1} moves the decoder's recurrent kernel's
gradient by about 10% and fails here.

Tolerance, float32: the two paths add the same terms in different orders (per step inside
autodiff's backward loop, or once after it) and through different kernels (a bincount against
a segment sum, a written-out log-softmax against autodiff of a gather minus a log-sum-exp), so
they differ by float32 roundings (unit roundoff 6e-8) of sums of up to a few hundred terms,
some of which cancel. Across these cases the largest difference is 4e-6 of the variable's
largest gradient entry (an attention bias under RL); RTOL = 2e-5 of it leaves a factor of five,
and is thousands of times below what the mutation above moves.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from pgn_tf import config as config_lib
from pgn_tf import objectives
from pgn_tf.models import build_model
from pgn_tf.vocab import START_ID, UNK_ID

V, B, L, T = 20, 3, 7, 5
RTOL = 2e-5  # of each variable's largest gradient entry (module docstring)


def batch(pointer: bool = True) -> dict:
    """Three articles of 7, 4 and 0 tokens (padding; an empty one), each of the first two with
    an article OOV (extended id V) that its summary copies (an [UNK] for a model without a
    pointer, as the data pipeline gives it); summaries of 5, 3 and 1 tokens, drawn from four
    words, so that the self-critical samples and the greedy baseline score apart."""
    rng = np.random.default_rng(0)
    ext = rng.integers(4, V, (B, L))
    ext[0, 2] = ext[0, 5] = V  # the same OOV twice: its copy probability sums two positions
    ext[1, 1] = V
    enc_len = np.array([7, 4, 0])
    ext = np.where(np.arange(L)[None] < enc_len[:, None], ext, 0)  # [PAD] past the length
    target = rng.integers(4, 8, (B, T))
    target[0, 1] = target[1, 2] = V if pointer else UNK_ID  # copied OOVs
    target[0, 3] = UNK_ID
    dec_len = np.array([5, 3, 1])
    target = np.where(np.arange(T)[None] < dec_len[:, None], target, 0)
    dec_input = np.concatenate([np.full((B, 1), START_ID), target[:, :-1]], axis=1)
    return {
        "enc_ids": tf.constant(np.where(ext >= V, UNK_ID, ext), tf.int32),
        "enc_ext_ids": tf.constant(ext, tf.int32),
        "enc_len": tf.constant(enc_len, tf.int32),
        "num_oovs": tf.constant([1, 1, 0], tf.int32),
        "dec_input": tf.constant(dec_input, tf.int32),
        "target": tf.constant(target, tf.int32),
        "dec_len": tf.constant(dec_len, tf.int32),
    }


def tiny(preset: str, objective: str, *overrides: str, **model) -> config_lib.Config:
    """The preset at tiny sizes (H = 6, E = 4; `model` sets more), with `objective` and
    `overrides`; self-critical searches of at most 6 tokens, gamma 0.5 (both halves of eq. 16
    weigh)."""
    cfg = config_lib.resolve(preset, [f"train.objective={objective}", "train.rl_gamma=0.5",
                                      "decode.max_dec_steps=8", "decode.min_dec_steps=8",
                                      *overrides])
    cfg.model.hidden_dim, cfg.model.emb_dim = 6, 4
    for key, value in model.items():
        setattr(cfg.model, key, value)
    return cfg


# See et al.'s models: an encoder of 2 x 5 apart from the decoder's 6, and dropout, under
# which the paths must agree too (the same seeded masks).
SEE = {"enc_hidden_dim": 5, "dropout": 0.25}
# Paulus et al.'s own sample replacing a previous token (appendix B) is drawn by an unseeded
# op, whose graph-level seed depends on the ops before it, which differ between the paths: off
# here (it changes integer inputs, never a gradient path).
PAULUS = {"sample_replace_prob": 0.0}
CONFIGS = {
    "see2017_baseline": lambda objective: tiny("see2017_baseline", objective, **SEE),
    "see2017_pgn": lambda objective: tiny("see2017_pgn", objective, **SEE),
    "see2017_coverage": lambda objective: tiny("see2017_coverage", objective, **SEE),
    "paulus2017": lambda objective: tiny("paulus2017", objective, **PAULUS),  # switch supervised
    "paulus2017_mixture": lambda objective: tiny(
        "paulus2017", objective, "train.pointer_supervision=false", **PAULUS),  # eq. 12
    "rush2015_abs": lambda objective: tiny("rush2015_abs", objective),
    # three samples an article against their leave-one-out baseline (train.rl_samples): the
    # searches run on the tiled encoding, whose gradient sums back over the copies
    "see2017_coverage_k3": lambda objective: tiny("see2017_coverage", objective,
                                                  "train.rl_samples=3", **SEE),
}
# Every model with the ML objective (with See et al.'s coverage term where the model has
# coverage, and Paulus et al.'s supervised switch or the plain mixture) and with self-critical
# RL (eq. 15; the switch's supervision is ML's only); "mixed" (eq. 16) adds the two, so one
# model suffices for it, and for it with several samples an article.
CASES = ([(name, "ml") for name in CONFIGS if name != "see2017_coverage_k3"]
         + [(name, "rl") for name in CONFIGS if name not in ("paulus2017_mixture",
                                                             "see2017_coverage_k3")]
         + [("see2017_coverage", "mixed"), ("see2017_coverage_k3", "mixed")])


def models(cfg: config_lib.Config):
    """(fused, keras) models of cfg.model holding the same weights, drawn well away from the
    papers' tiny inits so that every nonlinearity and every path matters (w_c included)."""
    built = {}
    for impl in ("fused", "keras"):
        cfg.model.rnn_impl = impl
        built[impl] = build_model(cfg.model, V)
        assert built[impl].rnn_impl == impl
    rng = np.random.default_rng(1)
    weights = [rng.normal(0.0, 0.5, w.shape).astype(np.float32)
               for w in built["fused"].get_weights()]
    for model in built.values():
        model.set_weights(weights)
    return built["fused"], built["keras"]


def loss_and_gradients(model, objective, features):
    """The objective's terms, its batch-mean "total" and that loss's gradient for every
    trainable variable, in a tf.function as training runs it (dense arrays; None where the loss
    does not reach)."""

    @tf.function
    def run():
        with tf.GradientTape() as tape:
            terms = objective(model, features, training=True)
            loss = tf.reduce_mean(terms["total"])
        return terms, loss, tape.gradient(loss, model.trainable_variables)

    tf.random.set_seed(7)  # the same samples (and dropout) on both paths
    terms, loss, grads = run()
    return ({k: v.numpy() for k, v in terms.items()}, loss.numpy(),
            [None if g is None else tf.convert_to_tensor(g).numpy() for g in grads])


@pytest.mark.slow
@pytest.mark.parametrize("name, objective", CASES)
def test_fused_gradients_equal_autodiff_of_the_keras_path(name, objective):
    cfg = CONFIGS[name](objective)
    features = batch(cfg.model.pointer_gen)
    assert (features["enc_len"].numpy() < L).any() and (features["dec_len"].numpy() < T).any()
    assert (features["enc_ext_ids"].numpy() >= V).any()
    fused, plain = models(cfg)
    obj = objectives.build(cfg)
    if isinstance(obj, objectives.SelfCritical):
        obj.seed = 3  # the sampled sequences: the same draws on both paths
    got_terms, got_loss, got = loss_and_gradients(fused, obj, features)
    want_terms, want_loss, want = loss_and_gradients(plain, obj, features)
    if objective != "ml":  # the same samples, and some that give the policy gradient a signal
        np.testing.assert_array_equal(got_terms["reward_sample"], want_terms["reward_sample"])
        assert want_terms["advantage_zero"].min() == 0.0
    np.testing.assert_allclose(got_loss, want_loss, rtol=1e-6)
    variables = [v.path for v in fused.trainable_variables]  # the same order in both
    assert [v.shape for v in fused.trainable_variables] == [
        v.shape for v in plain.trainable_variables]
    reached = [p for p, w in zip(variables, want) if w is not None]
    assert [p for p, g in zip(variables, got) if g is not None] == reached
    assert len(reached) >= len(variables) - 2, set(variables) - set(reached)
    for path, g, w in zip(variables, got, want):
        if w is None:
            continue
        scale = np.abs(w).max()
        assert scale > 0, f"{path}: a zero gradient tests nothing"
        np.testing.assert_allclose(g, w, rtol=0, atol=RTOL * scale,
                                   err_msg=f"{name} / {objective}: d loss / d {path}")


@pytest.mark.parametrize("name", ["see2017_coverage", "paulus2017", "rush2015_abs"])
def test_a_checkpoint_of_either_path_restores_into_the_other(name, tmp_path):
    """The same variables, names and shapes: a checkpoint written with rnn_impl=fused restores
    into a keras model (every value consumed, nothing left over) and gives the same loss, and
    back."""
    cfg = CONFIGS[name]("ml")
    features = batch(cfg.model.pointer_gen)
    fused, plain = models(cfg)
    names = {}
    for impl, model in (("fused", fused), ("keras", plain)):
        path = tf.train.Checkpoint(model=model).write(str(tmp_path / impl))
        names[impl] = dict(tf.train.list_variables(path))
    assert names["fused"] == names["keras"]
    for source, impl in (("fused", "keras"), ("keras", "fused")):
        cfg.model.rnn_impl = impl
        keras.utils.set_random_seed(5)  # other weights: every one must come from the file
        target = build_model(cfg.model, V)
        tf.train.Checkpoint(model=target).read(str(tmp_path / source)).assert_consumed()
        ml = objectives.build(cfg)
        want = ml(fused, features, training=False)["total"].numpy()
        np.testing.assert_allclose(ml(target, features, training=False)["total"].numpy(), want,
                                   rtol=1e-5)
