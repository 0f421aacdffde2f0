"""benchmarks/gpu_check: it finds cuDNN's LSTM ops in a traced step when Keras takes that path,
none on the fused CPU path, and its report says which device ran."""

import importlib
import json

import keras
import pytest
import tensorflow as tf

from benchmarks import gpu_check

pytestmark = pytest.mark.study  # the speed tools, apart from the product (pyproject.toml)


def traced_lstm_ops() -> set[str]:
    layer = keras.layers.LSTM(4, return_sequences=True)
    fn = tf.function(lambda x: layer(x), input_signature=[tf.TensorSpec([2, 3, 5], tf.float32)])
    return gpu_check.graph_op_types(fn.get_concrete_function())


def test_cudnn_ops_are_found_where_keras_takes_the_cudnn_path(monkeypatch):
    """Keras builds its LSTM from CudnnRNN ops when a GPU is visible: tracing with the GPU check
    answered yes shows the ops the report looks for (tracing needs no GPU kernel)."""
    rnn = importlib.import_module("keras.src.backend.tensorflow.rnn")
    monkeypatch.setattr(rnn, "_is_gpu_available", lambda: True)
    assert any(op.startswith("CudnnRNN") for op in traced_lstm_ops())
    monkeypatch.undo()
    assert not any("Cudnn" in op for op in traced_lstm_ops())


def test_the_report_on_a_cpu_says_so(capsys):
    assert gpu_check.main(["--configs", "tiny", "--steps", "2", "--warmup", "1",
                           "--decode_articles", "4", "--decode_length", "5"]) == 0
    out = capsys.readouterr().out
    assert "no GPU visible: this runs on the CPU" in out
    line = json.loads(out.strip().splitlines()[-1])
    assert line["device"] == "CPU" and line["gpus"] == []
    (row,) = line["configs"]
    assert row["rnn_impl"] == "fused" and row["cudnn"] is False and row["decode_length"] == 5
    assert row["sec_per_step"] > 0 and row["decode_tokens_per_sec"] > 0
