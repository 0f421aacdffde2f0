"""Progress bars that tell the truth: the training bar's ETA (not from the compiling first step;
the budget left under a time budget), and the counts of the long loops (JSONL -> TFRecord
conversion, vocabulary counting, perplexity)."""

import io
import json
import re
import types

from pgn_tf import config
from pgn_tf.data import dataset, tfrecord
from pgn_tf.inference import evaluator
from pgn_tf.training import loop
from pgn_tf.utils import progress


def _trainer(minutes: float, max_steps: int = 1_000_000):
    train = types.SimpleNamespace(max_minutes=minutes, max_steps=max_steps)
    return types.SimpleNamespace(cfg=types.SimpleNamespace(train=train), phase_start=0)


class _Clock:
    """A clock the test moves: no sleeps, no wall clock."""

    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def _plain(captured) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", captured.out)


def _shown(stream: io.StringIO) -> list[str]:
    lines = stream.getvalue().splitlines()
    stream.seek(0)
    stream.truncate()
    return lines


def test_the_eta_waits_for_the_steps_after_the_compiling_first_one():
    """A 600-step run whose first step traces for 20 s and whose steps then take 1/8 s: the
    bar says `compiling` until a step after the first is timed, then its ETA is 1/8 s a step
    (75 s), not the 20 s of the first step (3:19:40)."""
    clock, out = _Clock(), io.StringIO()
    bar = progress.StepBar(600, verbose=1, interval=5.0, clock=clock, stream=out)
    bar.update(0, [("step", 0)])
    assert _shown(out) == ["  0/600 [....................] compiling - step: 0"]
    clock.now += 20.0  # tracing and the first step
    bar.update(1, [("step", 1)])
    (line,) = _shown(out)
    assert "compiling" in line and "ETA" not in line and "ms/step" not in line
    clock.now += 0.125
    bar.update(2, [("step", 2)])  # the first pace: shown at once, inside the interval
    assert _shown(out) == ["  2/600 [....................] ETA 1:15 - 125ms/step - step: 2"]
    for step in range(3, 43):
        clock.now += 0.125
        bar.update(step, [("step", step), ("loss", 2.5)] if step % 10 == 0 else [("step", step)])
    (line,) = _shown(out)  # one line in the 5 s interval, at step 42: 558 steps left
    assert line == " 42/600 [=...................] ETA 1:10 - 125ms/step - step: 42 - loss: 2.5000"
    clock.now += 69.75
    bar.update(600, [("step", 600)], final=True)
    (line,) = _shown(out)
    assert line.startswith("600/600 [====================] 1:35 - 125ms/step") and "ETA" not in line


def test_the_pace_counts_from_the_first_step_seen():
    """A loop that reports from step 5 on (the bar made late) times its pace from there."""
    clock, out = _Clock(), io.StringIO()
    bar = progress.StepBar(100, verbose=1, clock=clock, stream=out)
    clock.now += 30.0
    bar.update(5)
    assert bar.pace(5, clock.now) is None
    clock.now += 2.0
    bar.update(9)
    assert bar.pace(9, clock.now) == 0.5 and "ETA 46s - 500ms/step" in _shown(out)[-1]


def test_silent_unless_asked_and_rewritten_in_place_on_a_terminal():
    clock, out = _Clock(), io.StringIO()
    bar = progress.StepBar(10, verbose=0, clock=clock, stream=out)
    bar.update(0)
    clock.now += 1
    bar.update(10, final=True)
    assert out.getvalue() == ""

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    tty = Terminal()
    bar = progress.StepBar(10, verbose=1, clock=clock, stream=tty)
    bar.update(0, [("step", 0)])
    clock.now += 3
    bar.update(1)
    clock.now += 1
    bar.update(2)
    clock.now += 8
    bar.update(10, final=True)
    text = tty.getvalue()
    assert text.startswith("\r 0/10 [") and text.count("\r") == 3 and text.endswith("\n")
    assert text.count("\n") == 1  # one line, rewritten, ended at the end


def test_budget_bar_counts_seconds_and_its_eta_is_the_budget_left(capsys):
    clock = _Clock()
    bar = loop._Progress(_trainer(minutes=2), verbose=1, clock=clock)  # when the loop starts
    assert "compiling" in _plain(capsys.readouterr())
    clock.now += 10
    bar.update(step=1, done=1, elapsed=10.0, values=None)
    clock.now += 20
    bar.update(step=57, done=57, elapsed=30.0, values=[("loss", 2.5)])
    out = _plain(capsys.readouterr())
    assert " 30/120s" in out and "ETA 1:30" in out and "step: 57" in out  # 90 s left
    clock.now += 60
    bar.update(step=170, done=170, elapsed=90.0, values=None)
    assert "ETA 30s" in _plain(capsys.readouterr())
    clock.now += 31
    bar.update(step=221, done=221, elapsed=121.0, values=None, final=True)
    assert "120/120s" in _plain(capsys.readouterr())

    steps = loop._Progress(_trainer(minutes=0, max_steps=200), verbose=1, clock=clock)
    clock.now += 10
    steps.update(step=1, done=1, elapsed=10.0, values=None)
    clock.now += 10
    steps.update(step=50, done=50, elapsed=20.0, values=None)
    out = _plain(capsys.readouterr())
    assert " 50/200" in out and "ETA 0:31" not in out and "ETA 31s" in out  # 150 x 10/49 s


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
