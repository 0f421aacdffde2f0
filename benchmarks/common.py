"""Shared helpers of the speed and memory tools: timing statistics, the `--cpu` emulation, the
figures' printout and JSON line (the machine's words from pgn_tf.utils.machine), the articles
they run on and a profile's top ops."""

from __future__ import annotations

import os
import platform
import sys

import numpy as np

from pgn_tf.utils import machine, onednn
from pgn_tf.utils.machine import CPU_EMULATIONS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def percentiles(latencies_s: list[float]) -> dict:
    ms = np.asarray(latencies_s) * 1000.0
    if not len(ms):
        return {"p50_ms": None, "p99_ms": None}
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2),
            "p99_ms": round(float(np.percentile(ms, 99)), 2)}


def cpu_flags() -> str:
    """The CPU's vector extensions and any emulation in force, as every figure names them
    (pgn_tf.utils.machine)."""
    return machine.cpu_flags_text()


def add_cpu_flag(parser) -> None:
    """`--cpu NAME` of compare_peer, train_throughput and decode_throughput (CPU_EMULATIONS)."""
    parser.add_argument("--cpu", choices=["native", *CPU_EMULATIONS], default="native",
                        help="run as a CPU of this type would (avx2: oneDNN, MKL and PyTorch's "
                             "kernels capped at AVX2, so float32 where `auto` would pick bf16; "
                             "the record names the emulation beside the real flags)")


def emulate_cpu(cpu: str, module: str, argv: list[str]) -> None:
    """Re-runs `python -m module argv` in this process with the caps of `cpu` in its
    environment (none for "native") and TensorFlow's oneDNN setting that pgn_tf's commands start
    with (pgn_tf.utils.onednn: on where unset), unless both are set already: each takes effect
    only when set before TensorFlow or PyTorch loads or first runs a kernel, so the process
    starts anew. A benchmark then measures what the commands run."""
    env = machine.emulation_environment(cpu, onednn.environment(os.environ, platform.machine()))
    if env == dict(os.environ):
        return
    sys.stdout.flush()
    os.execvpe(sys.executable, [sys.executable, "-m", module, *argv], env)


def refuse_emulated_bf16(cpu: str, precision: str, what: str) -> None:
    """ValueError where a run meant to show a CPU without bf16 asks for bf16 outright (it would
    run emulated, which no such user would choose)."""
    if cpu != "native" and precision == "mixed_bfloat16":
        raise ValueError(f"--cpu {cpu} runs as a CPU without bf16, but {what} sets "
                         "train.mixed_precision=mixed_bfloat16: leave it auto or float32")


def code_version() -> str:
    """The commit of this checkout (pgn_tf.utils.machine.code_version), for a run's record."""
    return machine.code_version(ROOT)


def result_line(name: str, result: dict) -> str:
    """The one JSON line a benchmark prints for tools: its name, figures and the machine."""
    return machine.result_line("benchmark", name, result)


def emit(name: str, result: dict) -> None:
    """Prints the figures readably (with the CPU's vector flags), then one JSON line for tools."""
    print("\n".join(machine.report_lines("benchmark", name, result)), flush=True)


def articles_from(path: str | None, n: int, model_dir: str | None = None) -> list[str]:
    """n articles from a data path (any pgn_tf format), else from the synthetic corpus."""
    if path:
        from pgn_tf.data.dataset import read_split

        exs = read_split(path, None, n)
        return [e.article for e in exs] * (n // len(exs) + 1)
    from pgn_tf.data import synthetic

    return [e.article for e in synthetic.generate(n, seed=99)]


_WRAPPERS = ("ExecutorState::Process", "ParallelFor")  # spans around ops, not ops


def top_ops(logdir: str, n: int = 15, scope_depth: int = 0) -> list[tuple[str, float]]:
    """(op type, % of op time) of a tf.profiler trace under logdir, from its XPlane (host ops);
    with scope_depth > 0, (the first scope_depth parts of the op's name, %) instead: e.g. at 4,
    "gradient_tape/pointer_generator_1/encoder_1/while" holds the encoder loop's gradient."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    totals: dict[str, float] = {}
    for root, _, files in os.walk(logdir):
        for fn in files:
            if not fn.endswith(".xplane.pb"):
                continue
            space = xplane_pb2.XSpace()
            with open(os.path.join(root, fn), "rb") as f:
                space.ParseFromString(f.read())
            for plane in space.planes:
                names = {k: v.name for k, v in plane.event_metadata.items()}
                for line in plane.lines:
                    # op events sit on "TF Ops" lines, or (TF 2.21's host trace) on the
                    # executor's "tf_Compute/..." threads, inside ExecutorState::Process spans
                    # that would count them twice
                    if not ("tf_op" in line.name.lower() or "TF Ops" in line.name
                            or line.name.startswith("tf_Compute")):
                        continue
                    for ev in line.events:
                        name = names.get(ev.metadata_id, "?")
                        if name in _WRAPPERS:
                            continue
                        if scope_depth:
                            op = "/".join(name.rsplit(":", 1)[0].split("/")[:scope_depth])
                        else:
                            op = name.split(":")[-1] if ":" in name else name
                        totals[op] = totals.get(op, 0.0) + ev.duration_ps / 1e12
    total = sum(totals.values()) or 1.0
    ranked = sorted(totals.items(), key=lambda kv: -kv[1])[:n]
    return [(op, round(100 * t / total, 1)) for op, t in ranked]
