"""Progress bars that tell the truth: the training budget's ETA, and the counts of the long
loops (JSONL -> TFRecord conversion, vocabulary counting, perplexity)."""

import json
import re
import types

from pgn_tf import config
from pgn_tf.data import dataset, tfrecord
from pgn_tf.inference import evaluator
from pgn_tf.training import loop


def _trainer(minutes: float, max_steps: int = 1_000_000):
    train = types.SimpleNamespace(max_minutes=minutes, max_steps=max_steps)
    return types.SimpleNamespace(cfg=types.SimpleNamespace(train=train), phase_start=0)


def _plain(captured) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", captured.out)


def test_budget_bar_counts_seconds_and_its_eta_is_the_budget_left(monkeypatch, capsys):
    import keras.src.utils.progbar as progbar_module

    clock = [1000.0]
    monkeypatch.setattr(progbar_module.time, "time", lambda: clock[0])
    bar = loop._Progress(_trainer(minutes=2), verbose=1)  # made when the timed loop starts
    clock[0] += 30
    bar.update(step=57, done=57, elapsed=30.0, values=[("loss", 2.5)])
    out = _plain(capsys.readouterr())
    assert " 30/120" in out and " 1:30" in out and "step: 57" in out  # 90 s of budget left
    clock[0] += 60
    bar.update(step=170, done=170, elapsed=90.0, values=None)
    assert " 30s" in _plain(capsys.readouterr())
    clock[0] += 31
    bar.update(step=221, done=221, elapsed=121.0, values=None, final=True)
    assert "120/120" in _plain(capsys.readouterr())

    steps = loop._Progress(_trainer(minutes=0, max_steps=200), verbose=1)
    clock[0] += 10
    steps.update(step=50, done=50, elapsed=10.0, values=None)
    assert " 50/200" in _plain(capsys.readouterr())


def test_conversion_vocab_and_perplexity_show_counts(corpus, trained_model_dir, tmp_path, capsys):
    records = list(tfrecord.read_tfrecords(corpus["validation"]))
    src = tmp_path / "v.jsonl"
    src.write_text("".join(json.dumps({"article": e.article, "summary": e.summary}) + "\n"
                           for e in records))
    files = dataset.resolve_files(str(src), str(tmp_path / "cache"), verbose=1)
    assert "40/Unknown" in _plain(capsys.readouterr())
    dataset.build_vocab(files, config.preset("tiny").data, verbose=1)
    assert "40/Unknown" in _plain(capsys.readouterr())
    dataset.build_vocab(files, config.preset("tiny").data)  # not a terminal: silent
    assert capsys.readouterr().out == ""

    from pgn_tf.inference.summarizer import Summarizer

    s = Summarizer.from_model_dir(trained_model_dir)
    ppl = evaluator.perplexity(s.model, s.vocab, s.cfg, records[:24], batch_size=8, verbose=1)
    assert "24/24" in _plain(capsys.readouterr()) and 1.0 < ppl < 50
