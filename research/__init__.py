"""The research archive: the studies, their raw outputs and the dated records (research/README.md)."""
