"""Apache Beam preprocessing and the TFX-style flow preprocess -> train -> evaluate/bless ->
push."""

if __name__ == "pipelines":  # imported from the repository root under its folder's name
    raise ImportError("'pipelines' is installed as pgn_tf.pipelines: run `python -m "
                      "pgn_tf.pipelines.MODULE` (or a pgn-* console command) after "
                      "`pip install -e .`")
