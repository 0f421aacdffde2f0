"""Strategies and multi-worker roles: the distribution strategy a run trains under
(`make_strategy`), the CPU split into logical devices, which worker is the chief, and a barrier
all workers pass together (MultiWorkerMirroredStrategy with TF_CONFIG; a single-machine strategy
is its own chief)."""

from __future__ import annotations

import json
import os

import tensorflow as tf

from pgn_tf.utils.errors import UserError


def worker_role(strategy: tf.distribute.Strategy) -> tuple[bool, int]:
    """(is this worker the chief, number of workers) from the strategy's cluster resolver
    (TF_CONFIG under MultiWorkerMirroredStrategy). The chief is task "chief", or worker 0 when
    the cluster has no chief; a single-machine strategy is its own chief."""
    resolver = getattr(strategy, "cluster_resolver", None)
    jobs = resolver.cluster_spec().as_dict() if resolver is not None else {}
    if not jobs:
        return True, 1
    workers = len(jobs.get("chief", [])) + len(jobs.get("worker", []))
    task = (resolver.task_type, resolver.task_id)
    return task == ("chief", 0) or (task == ("worker", 0) and "chief" not in jobs), workers


def barrier(strategy: tf.distribute.Strategy) -> None:
    """Returns when every worker has reached it (one all-reduce of a scalar)."""
    tf.function(lambda: strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)),
                                        axis=None), autograph=False)()


def set_cpu_devices(n: int) -> None:
    """Splits the CPU into n logical devices (must run before TF initialises its runtime)."""
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(n)]
    )


def make_strategy(name: str) -> tf.distribute.Strategy:
    """`mirrored`: MirroredStrategy over all local GPUs (else CPU devices), or the default
    strategy when there is only one device (no all-reduce or replica context to pay for);
    `multi_worker`: MultiWorkerMirroredStrategy from TF_CONFIG; `default`: no distribution.
    Created before any other TF op, as collective ops require."""
    if name == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        devices = [d.name for d in gpus] or [d.name for d in tf.config.list_logical_devices("CPU")]
        if len(devices) == 1:
            return tf.distribute.get_strategy()
        return tf.distribute.MirroredStrategy(devices)
    if name == "multi_worker":
        _check_tf_config(os.environ.get("TF_CONFIG"))
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "default":
        return tf.distribute.get_strategy()
    raise UserError(f"unknown --strategy '{name}' (mirrored, multi_worker, default)")


def _check_tf_config(raw: str | None) -> None:
    """TF_CONFIG names this process' task among the cluster's chief and workers (unset: one
    worker, this machine)."""
    if not raw:
        return
    try:
        tf_config = json.loads(raw)
        cluster, task = tf_config["cluster"], tf_config["task"]
        task_type, index = task["type"], int(task["index"])
    except (ValueError, KeyError, TypeError) as e:
        raise UserError('TF_CONFIG must be JSON {"cluster": {"worker": ["host:port", ...]}, '
                        f'"task": {{"type": "worker", "index": N}}}} ({type(e).__name__}: {e})'
                        ) from None
    if task_type not in ("chief", "worker"):
        raise UserError(f"TF_CONFIG task type '{task_type}' is not supported by pgn_tf.train "
                        f"(chief or worker)")
    if not 0 <= index < len(cluster.get(task_type, [])):
        raise UserError(f"TF_CONFIG task {task_type}:{index} is not in its cluster "
                        f"({', '.join(f'{k}: {len(v)}' for k, v in cluster.items())})")
