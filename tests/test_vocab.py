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
