"""The SavedModel: signatures, plain saved_model_cli, core ops only, bad input."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from pgn_tf import export as export_command
from pgn_tf.inference.summarizer import Summarizer
from pgn_tf.saved_model import contract as sc
from pgn_tf.saved_model import export
from pgn_tf.utils.errors import UserError

ARTICLE = ("zorblax , a pilot from quenton , sold 5512 boxes of apples on friday . "
           "officials said zorblax sold 5512 boxes of apples .")


@pytest.mark.slow
def test_signatures_and_versioned_layout(exported):
    base, name, path = exported
    assert path == os.path.join(base, name, "1")
    assert not [d for d in os.listdir(os.path.join(base, name)) if d.startswith(".tmp")]
    loaded = tf.saved_model.load(path)
    assert set(loaded.signatures) == {"serving_default", "summarize_verbose", "summarize_options"}
    out = loaded.signatures["summarize_verbose"](articles=tf.constant([ARTICLE, ""]))
    assert set(out) == {"summaries", "scores", "tokens", "attention", "p_gen", "raw_summaries",
                        "raw_tokens"}
    assert out["attention"].shape[0] == 2 and out["attention"].shape[1] == out["tokens"].shape[1]
    opt = loaded.signatures["summarize_options"](
        articles=tf.constant([ARTICLE]), beam_size=tf.constant(1),
        max_decode_steps=tf.constant(3), min_decode_steps=tf.constant(0))
    assert len(opt["summaries"].numpy()[0].split()) <= 3


def test_graph_holds_core_ops_only(exported):
    _, _, path = exported
    sm = saved_model_pb2.SavedModel.FromString(open(os.path.join(path, "saved_model.pb"), "rb").read())
    ops = {n.op for n in sm.meta_graphs[0].graph_def.node}
    for f in sm.meta_graphs[0].graph_def.library.function:
        ops |= {n.op for n in f.node_def}
    fn_names = {f.signature.name for f in sm.meta_graphs[0].graph_def.library.function}
    unknown = {op for op in ops - fn_names if op not in tf.raw_ops.__dict__}
    assert not unknown, unknown
    assert not any("Xla" in op for op in ops)


@pytest.mark.slow
def test_saved_model_cli_returns_the_in_process_summary(exported, trained_model_dir):
    _, _, path = exported
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    # A process that never imports tensorflow_text: only core ops may be needed.
    code = ("import sys; from tensorflow.python.tools import saved_model_cli as c; "
            "assert 'tensorflow_text' not in sys.modules; c.main()")
    proc = subprocess.run(
        [sys.executable, "-c", code, "run", "--dir", path, "--tag_set", "serve",
         "--signature_def", "serving_default", "--input_exprs", f"articles=[{ARTICLE!r}]"],
        capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    want = Summarizer.from_model_dir(trained_model_dir).summarize(tf.constant([ARTICLE]))
    assert repr(want["summaries"].numpy()[0]) in proc.stdout


def test_bad_articles_through_the_saved_model(exported):
    _, _, path = exported
    fn = tf.saved_model.load(path).signatures["serving_default"]
    batch = tf.constant([b"", b"   ", b"word " * 100_000, b"\xff\xfe\xc3 bad", ARTICLE.encode()])
    out = fn(articles=batch)
    assert out["summaries"].shape == (5,) and np.all(np.isfinite(out["scores"].numpy()))


def test_export_refuses_to_overwrite_and_checks_model_dir(exported, trained_model_dir, tmp_path):
    base, name, _ = exported
    with pytest.raises(UserError, match="already exists"):
        export.export(trained_model_dir, base, name, version=1, check=False)
    assert export_command.main(["--model_dir", str(tmp_path), "--export_base", str(tmp_path)]) == 2


@pytest.mark.slow
def test_decode_overrides_are_baked_into_the_export(trained_model_dir, tmp_path):
    import json

    with pytest.raises(UserError, match="only changes decode"):
        export.export(trained_model_dir, str(tmp_path), "m", version=1, overrides=["model.x=1"])
    path = export.export(trained_model_dir, str(tmp_path), "m", version=2, check=False,
                         overrides=["decode.max_dec_steps=2", "decode.min_dec_steps=0",
                                    "decode.jit_step=true"])
    with open(os.path.join(path, "assets.extra", "config.json")) as f:
        decode = json.load(f)["decode"]
    assert decode["max_dec_steps"] == 2
    assert decode["jit_step"] is False  # in-process only: TF Serving runs no XLA on the CPU
    sm = saved_model_pb2.SavedModel.FromString(open(os.path.join(path, "saved_model.pb"),
                                                    "rb").read())
    functions = sm.meta_graphs[0].graph_def.library.function
    nodes = [n for f in functions for n in f.node_def]
    assert not [f.signature.name for f in functions if f.attr["_XlaMustCompile"].b]
    assert not [n.name for n in nodes if n.attr["_XlaMustCompile"].b]
    loaded = tf.saved_model.load(path)
    assert sc.from_saved_model(loaded).max_decode_steps == 2  # the contract says what is baked in
    out = loaded.signatures["summarize_verbose"](articles=tf.constant([ARTICLE]))
    assert out["tokens"].shape[1] <= 2


@pytest.mark.slow
def test_a_dropped_load_of_the_export_is_freed(exported):
    """A server loads every new version and drops the old one: nothing of a dropped load may stay
    alive. (A tf.custom_gradient in the graph made each load register a process-wide gradient
    function holding the loaded graphs, so a server grew at every version swap:
    docs/reliability.md.)"""
    import gc

    _, _, path = exported

    def live_functions():
        gc.collect()
        return sum(type(o).__name__ == "AtomicFunction" for o in gc.get_objects())

    tf.saved_model.load(path)
    before = live_functions()
    for _ in range(2):
        loaded = tf.saved_model.load(path)
        assert loaded.signatures["serving_default"] is not None
        del loaded
    assert live_functions() == before


def test_the_serving_contract_travels_in_saved_model_pb_and_variables(exported, trained_model_dir,
                                                                      tmp_path):
    """A copy of only saved_model.pb and variables/ (what many TF Serving users copy) holds the
    contract: the export's decoding defaults and summarize_options' caps, as the graph checks
    them; serving does not need assets.extra/ for its limits."""
    import shutil

    _, _, path = exported
    bare = tmp_path / "1"
    bare.mkdir()
    shutil.copy(os.path.join(path, "saved_model.pb"), bare / "saved_model.pb")
    shutil.copytree(os.path.join(path, "variables"), bare / "variables")
    keys = [k for k, _ in tf.train.list_variables(str(bare / "variables" / "variables"))]
    assert f"{sc.SAVED_MODEL_ATTR}/0/.ATTRIBUTES/VARIABLE_VALUE" in keys  # a variable's value
    loaded = tf.saved_model.load(str(bare))
    contract = sc.from_saved_model(loaded)
    cfg = Summarizer.from_model_dir(trained_model_dir).cfg
    assert contract == export.serving_contract(cfg, export.option_limits(cfg))
    assert (contract.beam_size, contract.max_decode_steps) == (cfg.decode.beam_size, 16)
    assert contract.input_limits == {sc.SUMMARIZE_OPTIONS: {
        sc.BEAM_SIZE: (1, 16), sc.MAX_DECODE_STEPS: (1, 400), sc.MIN_DECODE_STEPS: (0, 400)}}
    contract.check_signatures({k: fn.structured_input_signature[1]
                               for k, fn in loaded.signatures.items()})
    assert not os.path.exists(os.path.join(path, "assets.extra", "serving_limits.json"))
