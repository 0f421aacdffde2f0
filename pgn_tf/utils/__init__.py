"""Infrastructure shared by training, data, evaluation and the pipelines.

  progress.py    progress bars and counters that stay quiet when not on a terminal
  durable.py     fsynced, atomic file writes
  dirlock.py     one writer per model dir or pipeline run dir
"""
