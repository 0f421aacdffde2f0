"""TF Serving-compatible serving for pgn_tf exports: a gRPC + REST server, a client, configs."""

if __name__ == "serving":  # imported from the repository root under its folder's name
    raise ImportError("'serving' is installed as pgn_tf.serving: run `python -m "
                      "pgn_tf.serving.MODULE` (or a pgn-* console command) after "
                      "`pip install -e .`")
