"""Training: the pieces `python -m pgn_tf.train` (pgn_tf/train.py, the command line) puts together.

  trainer.py     Trainer: data, model, optimizer, objective, the compiled train and eval steps,
                 phase restore, checkpoints and the best checkpoint
  loop.py        the loop: budget (steps or minutes), schedule, evaluation, selection, early stop
  guard.py       the gradient step: global-norm clip, the non-finite guard, loss scaling
  validation.py  what training decodes: validation ROUGE and TensorBoard samples
  optimizers.py  the optimizer factory; Adagrad and Adam on TF's fused training kernels
  distribute.py  multi-worker roles (the chief) and a barrier
  hardware.py    device and precision choice (bf16 / float16 / float32, rnn_impl's auto)
"""
