"""pgn_tf: pointer-generator summarization in TensorFlow 2 / Keras 3."""

from setuptools import find_packages, setup

setup(
    name="pgn_tf",
    version="0.1.0",
    description="Pointer-generator, coverage, intra-attention RL and ABS summarizers in TF2/Keras 3",
    packages=find_packages(include=["pgn_tf", "pgn_tf.*", "pipelines", "pipelines.*",
                                    "serving", "serving.*"]),
    python_requires=">=3.10",
    install_requires=[
        "tensorflow>=2.21,<2.22",
        "tensorboard>=2.21,<2.22",
        "keras>=3.10,<4",
        "tensorflow-text>=2.21,<2.22",
        "tensorflow-datasets>=4.9,<5",
        "tensorflow-serving-api>=2.21,<2.22",
        "grpcio>=1.60,<2",
        "waitress>=3.0.1,<4",  # serving.server's REST API (README: Reliability)
        "prometheus-client>=0.20,<1",  # serving.server's /monitoring/prometheus/metrics
        "protobuf>=5.28,<7",
        "rouge-score>=0.1.2,<0.2",
        "apache-beam>=2.70,<3",
        "google-crc32c>=1.5,<2",  # Beam's WriteToTFRecord checksums (its fast path)
        "pyyaml>=6",
        "numpy>=1.26",
    ],
    # importlib_resources: tensorflow-datasets needs it to prepare the TFDS fixture in the tests.
    extras_require={"test": ["pytest>=8", "ruff>=0.6", "importlib_resources>=6"]},
)
