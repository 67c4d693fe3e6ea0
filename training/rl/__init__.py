"""The RL trainer (docs/recipe.md sections 4-7): its config, loss, update, the in-process trainer and the
torchrun ranks at this level; below it, by concern:

- `algebra/`: the pure tensor functions: advantages, objectives, KL, mismatch, entropy, covariance.
- `batches/`: what one update trains on: the prompt cursor, staleness, dynamic sampling, the batch.
- `monitoring/`: what a run watches: per-task rollout metrics and records, drift alerts, the timeline.

Per-token tensors are `[B, T]` with a 0/1 `mask` over response tokens; per-sequence ones `[B]`.
Import from the modules (`passband.training.rl.algebra.advantages`, ...): these packages import nothing,
so reading an RL config (`passband config rl`) does not load torch.
"""
