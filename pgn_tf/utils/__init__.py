"""Infrastructure shared by training, data, evaluation and the pipelines.

  progress.py    progress bars and counters that stay quiet when not on a terminal
  durable.py     fsynced, atomic file writes
  dirlock.py     one writer per model dir or pipeline run dir
  errors.py      UserError and run_cli: a bad input is one line on standard error, exit code 2
  quiet.py       a quiet start: TensorFlow's harmless start-up noise hidden, --verbose for all
  machine.py     what a run was measured on: CPU vector flags, emulated CPU types, the commit
  child_process.py  a command run with its output in a log file, under a time limit or not
  work_dirs.py   a work dir claimed for one corpus, so two corpora never share one
"""
