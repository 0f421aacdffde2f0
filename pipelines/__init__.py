"""Apache Beam preprocessing and the TFX-style flow preprocess -> train -> evaluate/bless -> push."""
