"""The input pipeline's functions are traced without autograph, as the product's tf.functions
are (tests/test_no_autograph.py; docs/design.md, "Tracing without autograph"): tf.data hands
every map, filter, scan and window function to autograph unless it is marked
`do_not_convert`, and the rewrite of our source (and of everything it calls) was most of
tf.data's tracing time at a training start.

The test records every entity autograph transpiles (its `_convert_actual`, called for each
conversion, cached or not) while the datasets the product builds are made and read."""

import pytest
import tensorflow as tf
from tensorflow.python.autograph.impl import api as autograph_api

from pgn_tf.config import DataConfig
from pgn_tf.data import dataset, tfrecord
from pgn_tf.data.example import Example


@pytest.fixture
def converted(monkeypatch):
    """The names of the project's functions autograph converts while the test runs."""
    names = []
    actual = autograph_api._convert_actual

    def record(entity, program_ctx):
        module = getattr(entity, "__module__", "") or ""
        if module.split(".")[0] in ("pgn_tf", "tests"):
            names.append(f"{module}.{getattr(entity, '__qualname__', entity)}")
        return actual(entity, program_ctx)

    monkeypatch.setattr(autograph_api, "_convert_actual", record)
    return names


def test_the_recorder_sees_a_converted_function(converted):
    def branchy(x):
        return x + 1

    tf.data.Dataset.range(2).map(branchy)
    assert any(n.endswith("branchy") for n in converted), converted


@pytest.mark.parametrize("training,pointer,buckets,cache", [
    (True, True, True, False), (True, False, False, True), (False, True, False, False)])
def test_making_and_reading_a_dataset_converts_none_of_our_functions(
        converted, tmp_path, training, pointer, buckets, cache):
    files = tfrecord.write_tfrecords([Example("the cat sat on the mat .", "the cat\nsat")] * 8,
                                     str(tmp_path / "e"))
    cfg = DataConfig(max_enc_steps=16, max_dec_steps=8, bucket_by_length=buckets,
                     bucket_by_summary_length=buckets, cache_tokens=cache)
    voc = dataset.build_vocab(files, cfg, verbose=0)
    ds = dataset.make_dataset(files, voc, cfg, 2, pointer, training=training, seed=0)
    next(iter(ds.map(dataset.model_features)))
    assert converted == []


def test_checking_the_files_converts_none_of_our_functions(converted, tmp_path):
    files = tfrecord.write_tfrecords([Example("a b", "a"), Example("", "b")] * 3,
                                     str(tmp_path / "e"))
    assert tfrecord.validate_tfrecords(files) == 6
    dataset.require_usable_example(files, DataConfig())
    assert converted == []
