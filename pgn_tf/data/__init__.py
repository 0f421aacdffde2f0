"""Corpus readers, the TFRecord schema and the tf.data input function."""
