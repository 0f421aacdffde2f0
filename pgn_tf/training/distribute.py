"""Multi-worker roles: which worker is the chief, and a barrier all workers pass together
(MultiWorkerMirroredStrategy with TF_CONFIG; a single-machine strategy is its own chief)."""

from __future__ import annotations

import tensorflow as tf


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
                                        axis=None))()
