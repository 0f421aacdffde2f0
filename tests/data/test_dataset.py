import os

import numpy as np
import pytest
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


def token_records(lengths):
    """Tokenized records (tokenize_records' output) with the given (article, summary) token
    counts; each record's id is its index."""
    enc, dec = zip(*lengths)

    def record(i, n_enc, n_dec):
        return {"enc_tokens": tf.fill([n_enc], "a"), "dec_tokens": tf.fill([n_dec], "b"),
                "article": tf.constant("x"), "summary": tf.constant("y"),
                "id": tf.strings.as_string(i)}

    return tf.data.Dataset.from_tensor_slices((list(range(len(lengths))), list(enc), list(dec))
                                              ).map(record)


def bucket_of(n, bounds):
    return sum(n > b for b in bounds[:-1])


PAD = {"enc_tokens": [None], "dec_tokens": [None], "article": [], "summary": [], "id": []}
PAD_VALUES = {k: "" for k in PAD}


@pytest.mark.parametrize("fixed_shapes", [False, True])
def test_buckets_by_summary_length_yield_every_example_exactly_once(fixed_shapes):
    """12 buckets (4 of article length x 3 of summary length), 2 batches' worth in each, in a
    shuffled order: every example comes out once, in a batch whose members share its bucket,
    padded to the longest member (or, with fixed_shapes, to the bucket's bounds)."""
    cfg = DataConfig(max_enc_steps=40, max_dec_steps=12, bucket_by_summary_length=True)
    enc_bounds, dec_bounds = dataset.length_buckets(cfg)
    assert (enc_bounds, dec_bounds) == ([10, 20, 30, 40], [3, 6, 12])
    rng = np.random.default_rng(0)
    lengths = [(int(rng.integers(lo + 1, hi + 1)), int(rng.integers(dlo + 1, dhi + 1)))
               for lo, hi in zip([0] + enc_bounds, enc_bounds)
               for dlo, dhi in zip([0] + dec_bounds, dec_bounds) for _ in range(6)]
    order = rng.permutation(len(lengths))
    lengths = [lengths[i] for i in order]
    ds = dataset.bucket_batch(token_records(lengths), cfg, 3, PAD, PAD_VALUES, fixed_shapes)
    seen = []
    for b in ds.as_numpy_iterator():
        ids = [int(i) for i in b["id"]]
        seen += ids
        buckets = {(bucket_of(lengths[i][0], enc_bounds), bucket_of(lengths[i][1], dec_bounds))
                   for i in ids}
        assert len(buckets) == 1, buckets
        (e, d), = buckets
        want = ((enc_bounds[e], dec_bounds[d]) if fixed_shapes else
                (max(lengths[i][0] for i in ids), max(lengths[i][1] for i in ids)))
        assert (b["enc_tokens"].shape[1], b["dec_tokens"].shape[1]) == want
    assert sorted(seen) == list(range(len(lengths)))


def test_buckets_per_length_cut_both_lengths_into_equal_widths():
    """data.buckets_per_length = n: n equal-width buckets of each length, the summary-length
    ones replacing bucket_by_summary_length's (fewer where a length is shorter than n)."""
    cfg = DataConfig(max_enc_steps=100, max_dec_steps=30, buckets_per_length=10)
    assert dataset.length_buckets(cfg) == (list(range(10, 101, 10)), list(range(3, 31, 3)))
    cfg = DataConfig(max_enc_steps=40, max_dec_steps=4, buckets_per_length=8)
    assert dataset.length_buckets(cfg) == ([5, 10, 15, 20, 25, 30, 35, 40], [1, 2, 3, 4])
    huge = DataConfig(max_enc_steps=40, max_dec_steps=4, buckets_per_length=10**12)
    assert dataset.length_buckets(huge) == (list(range(1, 41)), [1, 2, 3, 4])  # one a length
    assert dataset.length_buckets(DataConfig(max_enc_steps=40, max_dec_steps=1,
                                             buckets_per_length=1)) == ([40], [1])
    # Four groups that only the 8 x 8 grid parts (the 4 x 3 one holds them all in one bucket),
    # the bounds inclusive (5 goes with 1 and 4), interleaved so that a coarser grid would mix them
    groups = [[(5, 3), (1, 3), (4, 3)], [(6, 3), (10, 3), (8, 3)], [(5, 4), (2, 4), (3, 4)],
              [(9, 4), (6, 4), (10, 4)]]
    lengths = [g[i] for i in range(3) for g in groups]
    batches = list(dataset.bucket_batch(token_records(lengths), cfg, 3, PAD, PAD_VALUES, False)
                   .as_numpy_iterator())
    assert sorted(sorted(int(i) for i in b["id"]) for b in batches) == [
        [0, 4, 8], [1, 5, 9], [2, 6, 10], [3, 7, 11]]
    assert sorted((b["enc_tokens"].shape[1], b["dec_tokens"].shape[1]) for b in batches) == [
        (5, 3), (5, 4), (10, 3), (10, 4)]


def test_a_bucket_short_of_a_batch_is_held_back_not_repeated():
    cfg = DataConfig(max_enc_steps=40, max_dec_steps=12, bucket_by_summary_length=True)
    lengths = [(5, 2)] * 4 + [(35, 10)] * 2  # batch 3: one full batch and one left over ...
    ds = dataset.bucket_batch(token_records(lengths), cfg, 3, PAD, PAD_VALUES, False)
    seen = [int(i) for b in ds.as_numpy_iterator() for i in b["id"]]
    assert len(seen) == len(set(seen)) == 3 and set(seen) <= {0, 1, 2, 3}  # ... in bucket 0


def test_article_buckets_alone_batch_as_bucket_by_sequence_length():
    """Without data.bucket_by_summary_length (the default) the batches are exactly those of
    tf.data's bucket_by_sequence_length at quarters of max_enc_steps (the earlier batching)."""
    cfg = DataConfig(max_enc_steps=40, max_dec_steps=12)
    rng = np.random.default_rng(1)
    lengths = [(int(rng.integers(1, 41)), int(rng.integers(1, 13))) for _ in range(60)]
    got = dataset.bucket_batch(token_records(lengths), cfg, 4, PAD, PAD_VALUES, False)
    want = token_records(lengths).bucket_by_sequence_length(
        lambda d: tf.size(d["enc_tokens"]), bucket_boundaries=[11, 21, 31],
        bucket_batch_sizes=[4] * 4, padded_shapes=PAD, padding_values=PAD_VALUES,
        drop_remainder=True)
    got, want = list(got.as_numpy_iterator()), list(want.as_numpy_iterator())
    assert len(got) == len(want) >= 10
    for g, w in zip(got, want):
        assert g["id"].tolist() == w["id"].tolist()
        assert g["enc_tokens"].shape == w["enc_tokens"].shape
        assert g["dec_tokens"].shape == w["dec_tokens"].shape


def _lengths_files(tmp_path, n=7):
    """A TFRecord file of n examples whose articles have 3, 6, ... 3n tokens."""
    exs = [Example("the cat sat " + "on the mat " * k, "the cat") for k in range(n)]
    return tfrecord.write_tfrecords(exs, str(tmp_path / "c"))


def test_cached_tokens_are_read_once_and_replayed(tmp_path):
    """With data.cache_tokens the records are read and tokenized in the first epoch only: the
    files can go after it, and later epochs replay the same examples."""
    files = _lengths_files(tmp_path)
    cfg = DataConfig(vocab_size=10, max_enc_steps=40, max_dec_steps=6, bucket_by_length=False,
                     cache_tokens=True, shuffle_buffer=1)
    it = iter(dataset.make_dataset(files, _vocab(), cfg, 1, True, training=True, seed=3))
    lens = [int(next(it)["enc_len"][0]) for _ in range(10)]  # past the end of the first epoch
    for fn in files:
        os.remove(fn)
    lens += [int(next(it)["enc_len"][0]) for _ in range(25)]
    epochs = [lens[i:i + 7] for i in range(0, 35, 7)]
    assert epochs == [[3 * k + 3 for k in range(7)]] * 5


@pytest.mark.slow
def test_cached_tokens_shuffle_repeatably_for_a_seed(tmp_path):
    """Resuming skips the batches already consumed: the order must be the same for a seed."""
    files = _lengths_files(tmp_path)
    cfg = DataConfig(vocab_size=10, max_enc_steps=40, max_dec_steps=6, bucket_by_length=False,
                     cache_tokens=True, shuffle_buffer=5)

    def enc_lens(seed):
        ds = dataset.make_dataset(files, _vocab(), cfg, 1, True, training=True, seed=seed)
        return [int(b["enc_len"][0]) for b in ds.take(21).as_numpy_iterator()]

    first = enc_lens(3)
    assert enc_lens(3) == first
    assert first[:7] != [3 * k + 3 for k in range(7)]  # shuffled
    assert enc_lens(4) != first


def test_fixed_shapes_without_buckets_pad_to_the_maximum(tmp_path):
    files = tfrecord.write_tfrecords([Example("the cat sat", "the cat")] * 4,
                                     str(tmp_path / "f"))
    cfg = DataConfig(vocab_size=10, max_enc_steps=7, max_dec_steps=5)
    b = next(iter(dataset.make_dataset(files, _vocab(), cfg, 2, True, training=False,
                                       fixed_shapes=True)))
    assert b["enc_ids"].shape == (2, 7) and b["dec_input"].shape == (2, 5)
    assert b["enc_len"].numpy().tolist() == [3, 3] and b["dec_len"].numpy().tolist() == [3, 3]


def test_evaluation_skips_the_first_records_in_file_order(tmp_path):
    """train.eval_skip: the eval loss reads the records after the first N, across files in
    their order, the same records the validation ROUGE's reader (one file after another) skips."""
    exs = [Example("the cat sat " + "on the mat " * k, "the cat") for k in range(7)]
    files = (tfrecord.write_tfrecords(exs[:4], str(tmp_path / "a"))
             + tfrecord.write_tfrecords(exs[4:], str(tmp_path / "b")))
    cfg = DataConfig(vocab_size=10, max_enc_steps=40, max_dec_steps=6, bucket_by_length=False)

    def enc_lens(skip):
        ds = dataset.make_dataset(files, _vocab(), cfg, 1, True, training=False, skip=skip)
        return [int(b["enc_len"][0]) for b in ds.as_numpy_iterator()]

    assert enc_lens(0) == [3, 6, 9, 12, 15, 18, 21]
    assert enc_lens(3) == [12, 15, 18, 21]
    assert enc_lens(7) == []
    with pytest.raises(ValueError, match="skip is for evaluation data"):
        dataset.make_dataset(files, _vocab(), cfg, 1, True, training=True, skip=1)
