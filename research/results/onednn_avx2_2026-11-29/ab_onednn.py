"""TensorFlow's oneDNN kernels off (TF_ENABLE_ONEDNN_OPTS=0: TensorFlow's default on a CPU with
AVX2 only) against on (=1: what pgn_tf's commands now start with), alternating in one run on
one machine: the training step (benchmarks.train_throughput, reference sizes) and the beam
search forced to 30 tokens (benchmarks.decode_throughput on a 300-step reference model).

    python ab_onednn.py MODEL_DIR DATA_DIR [ROUNDS]
"""
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))


def run(setting: str, argv: list[str]) -> dict:
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": setting}
    out = subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads([x for x in out.splitlines() if x.startswith("{")][-1])


def main(model_dir: str, data: str, rounds: int = 3) -> None:
    train = ["benchmarks.train_throughput", "--config", "reference_onmt", "--data",
             f"{data}/train.jsonl.gz", "--steps", "60", "--warmup", "20"]
    decode = ["benchmarks.decode_throughput", "--model_dir", model_dir, "--data",
              f"{data}/validation.jsonl.gz", "--articles", "512", "--beams", "4", "--batches",
              "64", "--min_steps", "30", "--max_steps", "30", "--skip_saved_model"]
    figures = {(w, s): [] for w in ("train", "decode") for s in ("0", "1")}
    for r in range(rounds):
        for what, argv, key in (("train", train, "src_tokens_per_sec"),
                                ("decode", decode, "articles_per_sec")):
            for setting in ("0", "1"):
                line = run(setting, argv)
                figures[(what, setting)].append(line[key])
                print(f"round {r + 1} {what} TF_ENABLE_ONEDNN_OPTS={setting}: {key} "
                      f"{line[key]} ({line['tf_onednn']}; cpu_flags {line['cpu_flags']})",
                      flush=True)
    for what in ("train", "decode"):
        off, on = figures[(what, "0")], figures[(what, "1")]
        each = [round(b / a, 3) for a, b in zip(off, on)]
        print(json.dumps({"what": what, "off": off, "on": on, "on_over_off_each_round": each,
                          "median_on_over_off": statistics.median(each)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *(int(x) for x in sys.argv[3:4]))
