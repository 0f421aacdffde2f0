"""The Beam pipelines on the DirectRunner and on a 2-worker local dask cluster (Beam's DaskRunner):
records/s of `pgn_tf.pipelines.preprocess`, and of `pgn_tf.pipelines.summarize` with
--saved_model, and what the cluster costs per record.

    python -m benchmarks.beam_runners [--records 20000] [--files 4] [--repeats 2] \
        [--saved_model BASE/NAME/VERSION --summarize_records 64]

The input is the synthetic corpus (pgn_tf.data.synthetic) written as --files gzipped JSONL
files, so the DaskRunner (with --dask_npartitions 2) reads in two partitions. The cluster is a
dask.distributed LocalCluster: the scheduler in this process, two single-threaded worker
processes. Each figure is the fastest of --repeats runs (the first run on the cluster includes
the workers' TensorFlow import). On a 2-core machine no speed-up is expected: the cluster's
figure is its cost (pickling, the task graph, moving data between processes) per record, which
is what `dask_cost_ms_per_record` reports. Both runners' counts and files are compared.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import tempfile

from benchmarks.common import emit


def digests(directory: str) -> dict[str, str]:
    """{file: sha1} of an output directory, the run's stats.json (timings) aside."""
    return {n: hashlib.sha1(open(os.path.join(directory, n), "rb").read()).hexdigest()
            for n in sorted(os.listdir(directory)) if n != "stats.json"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=20_000)
    p.add_argument("--files", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--saved_model", help="also time pgn_tf.pipelines.summarize with this export")
    p.add_argument("--summarize_records", type=int, default=64)
    a = p.parse_args()

    from distributed import LocalCluster

    from pgn_tf.data import jsonl, synthetic
    from pgn_tf.pipelines import preprocessing, summarizing

    result = {"records": a.records, "files": a.files, "workers": 2, "repeats": a.repeats}
    with tempfile.TemporaryDirectory() as tmp, LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
            local_directory=os.path.join(tmp, "dask")) as cluster:
        data = os.path.join(tmp, "in")
        os.makedirs(data)
        exs = synthetic.generate(a.records, seed=11)
        for i in range(a.files):
            jsonl.write_jsonl(exs[i :: a.files], os.path.join(data, f"part-{i}.jsonl.gz"))
        runners = {"direct": {}, "dask": {"runner": "DaskRunner", "beam_args": [
            "--dask_client_address", cluster.scheduler_address, "--dask_npartitions", "2"]}}

        def fastest(label: str, run) -> tuple[float, dict, str]:
            """(seconds, stats, output dir) of the fastest of a.repeats runs of
            run(output dir)."""
            best = None
            for r in range(a.repeats):
                out = os.path.join(tmp, f"{label}-{r}")
                stats = run(out)
                if best is None or stats["seconds"] < best[0]:
                    best = (stats["seconds"], stats, out)
            return best

        pre = {name: fastest(f"preprocess-{name}", lambda out, kw=kw: preprocessing.preprocess_corpus(
            os.path.join(data, "*.jsonl.gz"), out, fmt="jsonl", vocab_size=20000, **kw))
            for name, kw in runners.items()}
        for name, (seconds, stats, _) in pre.items():
            result[f"preprocess_{name}_records_per_sec"] = round(stats["read"] / seconds, 1)
            result[f"preprocess_{name}_ms_per_record"] = round(1000 * seconds / stats["read"], 3)
        result["preprocess_dask_cost_ms_per_record"] = round(
            result["preprocess_dask_ms_per_record"] - result["preprocess_direct_ms_per_record"], 3)
        strip = ("seconds", "records_per_sec", "runner")
        same = [{k: v for k, v in s.items() if k not in strip} for _, s, _ in pre.values()]
        result["preprocess_same_counts"] = same[0] == same[1]
        result["preprocess_same_files"] = digests(pre["direct"][2]) == digests(pre["dask"][2])

        if a.saved_model:
            src = os.path.join(tmp, "articles.jsonl.gz")
            jsonl.write_jsonl(synthetic.generate(a.summarize_records, seed=12), src)
            summ = {name: fastest(f"summarize-{name}", lambda out, kw=kw: summarizing.summarize_files(
                a.saved_model, src, os.path.join(out, "s"), **kw))
                for name, kw in runners.items()}
            for name, (seconds, stats, _) in summ.items():
                result[f"summarize_{name}_articles_per_sec"] = round(
                    stats["summaries"] / seconds, 2)
            result["summarize_dask_cost_ms_per_article"] = round(
                1000 * (summ["dask"][0] - summ["direct"][0]) / a.summarize_records, 1)
            result["summarize_same_files"] = (digests(summ["direct"][2])
                                              == digests(summ["dask"][2]))
    emit("beam_runners", result)


if __name__ == "__main__":
    main()
