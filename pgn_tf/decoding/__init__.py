"""Search strategies written once against `step_fn(ids, step, state)`: beam, greedy, sampling."""
