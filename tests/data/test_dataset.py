import tensorflow as tf

from pgn_tf import vocab as V
from pgn_tf.config import DataConfig
from pgn_tf.data import dataset, tfrecord
from pgn_tf.data.example import Example


def _vocab():
    return V.Vocab(["the", "cat", "sat", ".", "on", "mat"])


def test_batch_features_follow_see_et_al_convention(tmp_path):
    exs = [Example("The cat Zorg sat on the mat.", "Zorg sat ."),
           Example("The mat.", "the cat sat on the mat . the cat sat")]
    files = tfrecord.write_tfrecords(exs, str(tmp_path / "d"))
    cfg = DataConfig(vocab_size=10, max_enc_steps=5, max_dec_steps=6)
    voc = _vocab()
    b = next(iter(dataset.make_dataset(files, voc, cfg, 2, True, training=False)))
    w = voc.word_to_id
    assert b["enc_len"].numpy().tolist() == [5, 3]  # truncated to max_enc_steps
    # Zorg is OOV 0 of article 0 -> id V + 0 in the extended ids, [UNK] in enc_ids
    assert b["enc_ext_ids"].numpy()[0].tolist() == [w("the"), w("cat"), voc.size, w("sat"), w("on")]
    assert b["enc_ids"].numpy()[0].tolist()[2] == V.UNK_ID
    assert b["oovs"].numpy()[0, 0] == b"zorg"
    assert b["dec_input"].numpy()[0].tolist()[:4] == [V.START_ID, V.UNK_ID, w("sat"), w(".")]
    assert b["target"].numpy()[0].tolist()[:4] == [voc.size, w("sat"), w("."), V.STOP_ID]
    assert b["dec_len"].numpy().tolist() == [4, 6]
    # the long summary is cut: no [STOP] when it does not fit (See et al.)
    assert V.STOP_ID not in b["target"].numpy()[1].tolist()


def test_baseline_targets_use_unk():
    voc = _vocab()
    batch = {"enc_tokens": tf.constant([["zorg", "sat"]]), "dec_tokens": tf.constant([["zorg"]]),
             "article": tf.constant(["x"]), "summary": tf.constant(["y"]), "id": tf.constant([""])}
    feats = dataset.encode_batch(batch, voc, 4, pointer_gen=False)
    assert feats["target"].numpy().tolist() == [[V.UNK_ID, V.STOP_ID]]
    feats = dataset.encode_batch(batch, voc, 4, pointer_gen=True)
    assert feats["target"].numpy().tolist() == [[voc.size, V.STOP_ID]]


def test_training_dataset_drops_empty_and_batches(corpus, vocab, tiny_cfg, tmp_path):
    files = tfrecord.write_tfrecords(
        [Example("", "summary"), Example("article", "")] * 3 + [Example("a b c", "a")] * 8,
        str(tmp_path / "e"),
    )
    ds = dataset.make_dataset(files, vocab, tiny_cfg.data, 4, True, training=True, seed=0)
    for b in ds.take(3):
        assert b["enc_len"].shape == (4,) and tf.reduce_all(b["enc_len"] > 0)
        assert tf.reduce_all(b["dec_len"] > 1)
