"""Coverage-guided and structured fuzz campaigns against the server, the decoders and the model (the `fuzz` extra: atheris, h2)."""
