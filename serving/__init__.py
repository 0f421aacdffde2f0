"""TF Serving-compatible serving for pgn_tf exports: a gRPC + REST server, a client, configs."""
