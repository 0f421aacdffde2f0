"""Infrastructure shared by training, data, evaluation and the pipelines.

  progress.py    progress bars and counters that stay quiet when not on a terminal
  durable.py     fsynced, atomic file writes
  dirlock.py     one writer per model dir or pipeline run dir
  errors.py      UserError and run_cli: a bad input is one line on standard error, exit code 2
  quiet.py       a quiet start: TensorFlow's harmless start-up noise hidden, --verbose for all
"""
