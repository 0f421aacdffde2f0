"""Training: the pieces `python -m pgn_tf.train` (pgn_tf/train.py, the command line) puts together.

  trainer.py     Trainer: data, model, optimizer, objective, the compiled train and eval steps,
                 checkpoints and the best checkpoint; the clipped, NaN-guarded gradient step
  loop.py        the loop: budget (steps or minutes), schedule, evaluation, selection, early stop
  optimizers.py  Adagrad and Adam on TF's fused training kernels
  hardware.py    device and precision choice (bf16 / float16 / float32, rnn_impl's auto)
"""
