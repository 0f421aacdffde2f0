import collections

import numpy as np
import pytest
import tensorflow as tf

from pgn_tf import vocab as V


def test_file_round_trip_and_special_tokens(tmp_path):
    voc = V.Vocab.from_counter(collections.Counter({"the": 5, "cat": 3, "sat": 3, "x": 1}), 6)
    assert voc.words[:4] == list(V.SPECIAL_TOKENS)
    assert voc.words[4:] == ["the", "cat"]  # ties broken alphabetically, size counts specials
    path = tmp_path / "vocab.txt"
    voc.save(str(path))
    assert path.read_text() == "the 5\ncat 3\n"
    again = V.Vocab.load(str(path))
    assert again.words == voc.words
    assert V.Vocab.load(str(path), max_size=5).words == voc.words[:5]


def test_missing_and_bad_vocab_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        V.Vocab.load(str(tmp_path / "nope.txt"))
    bad = tmp_path / "bad.txt"
    bad.write_text("the five\n")
    with pytest.raises(ValueError, match="line 1"):
        V.Vocab.load(str(bad))


def _reference_extend(tokens, vocab_words, vocab_size):
    ids, oovs = [], []
    for t in tokens:
        if t in vocab_words:
            ids.append(vocab_words.index(t))
        else:
            if t not in oovs:
                oovs.append(t)
            ids.append(vocab_size + oovs.index(t))
    return ids, oovs


def test_extend_vocab_matches_python_reference():
    voc = V.Vocab(["a", "b", "c"])
    rows = [["a", "zed", "b", "qq", "zed", "c", "qq", "yy"], ["zed", "a", "", "", "", "", "", ""]]
    tokens = tf.constant(rows)
    mask = tf.not_equal(tokens, "")
    ids = tf.where(mask, tf.cast(voc.lookup_table.lookup(tokens), tf.int32), 0)
    ext, oovs, n = V.extend_vocab(tokens, ids, mask, voc.size)
    for b, row in enumerate(rows):
        real = [t for t in row if t]
        ref_ids, ref_oovs = _reference_extend(real, voc.words, voc.size)
        assert ext.numpy()[b, : len(real)].tolist() == ref_ids
        assert [o.decode() for o in oovs.numpy()[b, : n.numpy()[b]]] == ref_oovs
    target = tf.constant([["qq", "a", "nothere", "zed"], ["zed", "zed", "qq", ""]])
    tids = tf.cast(voc.lookup_table.lookup(target), tf.int32)
    got = V.target_ext_ids(target, tids, oovs, voc.size).numpy()
    assert got[0].tolist() == [8, 4, V.UNK_ID, 7]
    assert got[1].tolist()[:3] == [7, 7, V.UNK_ID]  # qq is not in the second article
    words = V.ids_to_words(tf.constant([[8, 4, 7, 99]]), voc.words_tensor, oovs[:1]).numpy()
    assert [w.decode() for w in words[0]] == ["qq", "a", "zed", ""]
    np.testing.assert_array_equal(n.numpy(), [3, 1])


def _first_positions_reference(keys, valid):
    """The first valid j with keys[j] == keys[i] for a valid i, i itself otherwise: every
    pair compared."""
    out = np.tile(np.arange(keys.shape[1]), (keys.shape[0], 1))
    for b, i in zip(*np.nonzero(valid)):
        out[b, i] = min(j for j in range(keys.shape[1]) if valid[b, j] and keys[b, j] == keys[b, i])
    return out


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("shape", [(4, 30), (3, 1), (2, 0), (0, 5)])
def test_first_positions_equal_the_pairwise_reference(dtype, shape):
    """The sorted form (no [B, L, L] comparison) gives what comparing every pair gives:
    repeated keys, invalid positions among them (never a first), keys large and negative,
    rows with nothing valid, empty batches and rows."""
    rng = np.random.default_rng(len(shape) + shape[0] * 7 + shape[1])
    for _ in range(5):
        keys = rng.integers(-3, 6, size=shape).astype(dtype)
        if dtype == "int64" and keys.size:
            keys[..., 0] = 2**62 - 1  # a hash's range
        valid = rng.random(shape) < 0.7
        if shape[0] > 1:
            valid[1] = False  # a row of padding only
        got = V.first_positions(tf.constant(keys), tf.constant(valid)).numpy()
        np.testing.assert_array_equal(got, _first_positions_reference(keys, valid))
