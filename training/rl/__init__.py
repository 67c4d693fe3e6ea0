"""The RL algorithm library: pure tensor functions (docs/recipe.md sections 4-7), one module per idea.

Per-token tensors are `[B, T]` with a 0/1 `mask` over response tokens; per-sequence ones `[B]`.
Import from the modules (`passband.training.rl.advantages`, ...): this package imports nothing, so
reading an RL config (`passband config rl`) does not load torch.
"""
