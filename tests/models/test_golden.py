"""Seeded golden losses: each model, built with fixed sizes after `keras.utils.set_random_seed(0)`,
on one fixed tiny batch, gives the per-example ML loss recorded here (to 1e-5 relative). They
guard the whole forward pass (initializers, encoder, decoder, attention, pointer, loss) against
silent drift; the NumPy references in tests/layers say which layer moved.

On a deliberate change of the numbers (a new initializer, a reordered or fused weight, another
loss), regenerate them from the repository root and paste the printed dict over GOLDEN:

    python -m tests.models.test_golden

and say in the commit message why they changed.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from pgn_tf import objectives
from pgn_tf.models.abs import ABS
from pgn_tf.models.deep_reinforced import DeepReinforced
from pgn_tf.models.pointer_generator import PointerGenerator
from pgn_tf.vocab import UNK_ID

V, B, L, T = 20, 3, 7, 5

# Weights well away from the papers' tiny inits (0.02 uniform, 1e-4 normal), which leave every
# logit near 0 and every loss near log V whatever the forward pass does.
INIT = {"init_mag": 1.0, "init_std": 0.5, "emb_init_std": 1.0}


def see_coverage():
    model = PointerGenerator(V, 8, 6, coverage=True, **INIT)
    # w_c starts at 0 (so converting changes nothing); here coverage must move the attention.
    model.cell.attention.w_c.assign(np.linspace(-1.0, 1.0, 16, dtype=np.float32))
    return model


def abs_model(encoder: str, **kwargs):
    model = ABS(V, hidden_dim=8, emb_dim=6, window=3, encoder=encoder, **kwargs)
    # ABS takes no init arguments: its embeddings (Keras' 0.05 uniform) are scaled instead.
    for var in model.weights:
        if var.path.endswith("embeddings"):
            var.assign(var * 10.0)
    return model


# name: (model factory, objective, pointer_gen batch)
MODELS = {
    "see_baseline": (lambda: PointerGenerator(V, 8, 6, pointer_gen=False, **INIT),
                     objectives.MaximumLikelihood(), False),
    "see_pgn": (lambda: PointerGenerator(V, 8, 6, **INIT), objectives.MaximumLikelihood(), True),
    "see_coverage": (see_coverage, objectives.MaximumLikelihood(coverage_weight=1.0), True),
    "paulus": (lambda: DeepReinforced(V, hidden_dim=4, emb_dim=6, **INIT),
               objectives.MaximumLikelihood("sum", pointer_supervision=True), True),
    "abs_bow": (lambda: abs_model("bow"), objectives.MaximumLikelihood("sum"), False),
    "abs_conv": (lambda: abs_model("conv", conv_layers=2), objectives.MaximumLikelihood("sum"),
                 False),
    "abs_attention": (lambda: abs_model("attention"), objectives.MaximumLikelihood("sum"), False),
}

GOLDEN = {
    "abs_attention": [14.66, 8.767414, 3.635264],
    "abs_bow": [14.83699, 8.811581, 3.25718],
    "abs_conv": [14.55797, 8.426923, 3.438495],
    "paulus": [18.36018, 11.29173, 4.322432],
    "see_baseline": [2.956704, 2.962797, 2.384045],
    "see_coverage": [3.401992, 3.475982, 3.378761],
    "see_pgn": [2.596554, 2.806724, 3.378761],
}


def golden_batch(pointer_gen: bool) -> dict:
    """Three articles of lengths 7, 5, 2 with two article OOVs (ids V, V + 1) that the summaries
    copy; for the models without a pointer, target OOVs are [UNK] (as the dataset gives them)."""
    enc_ext = np.array([[5, V, 7, 8, V + 1, 5, 9],
                        [V, 11, 12, 13, 6, 0, 0],
                        [14, V, 0, 0, 0, 0, 0]], np.int32)
    target = np.array([[5, V, 9, V + 1, 3],
                       [12, V, 3, 0, 0],
                       [3, 0, 0, 0, 0]], np.int32)  # 3 = [STOP]
    dec_input = np.c_[np.full(B, 2), target[:, :-1]]  # [START] then the target, shifted
    if not pointer_gen:
        target = np.where(target >= V, UNK_ID, target)
    return {
        "enc_ids": tf.constant(np.where(enc_ext >= V, UNK_ID, enc_ext)),
        "enc_ext_ids": tf.constant(enc_ext),
        "enc_len": tf.constant([7, 5, 2]),
        "num_oovs": tf.constant([2, 1, 1]),
        "dec_input": tf.constant(np.where(dec_input >= V, UNK_ID, dec_input).astype(np.int32)),
        "target": tf.constant(target),
        "dec_len": tf.constant([5, 3, 1]),
    }


def golden_loss(name: str) -> np.ndarray:
    """The per-example "total" of the model's objective, float32 [B]."""
    make, objective, pointer_gen = MODELS[name]
    keras.utils.set_random_seed(0)
    model = make()
    return objective(model, golden_batch(pointer_gen), training=False)["total"].numpy()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_golden_loss(name):
    got = golden_loss(name)
    np.testing.assert_allclose(got, GOLDEN[name], rtol=1e-5, err_msg=(
        f"{name}: the loss moved; if deliberate, regenerate (module docstring)"))


if __name__ == "__main__":
    print("GOLDEN = {")
    for key in sorted(MODELS):
        values = ", ".join(f"{v:.7g}" for v in golden_loss(key))
        print(f'    "{key}": [{values}],')
    print("}")
