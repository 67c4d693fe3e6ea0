"""Learning-rate schedule as a pure function of the step.

Because the rate depends only on (step, settings), the step number saved in a checkpoint is the
whole scheduler state: a resumed run sets the same rate at every step as an uninterrupted one.
"""

from __future__ import annotations

import math


def lr_at(step: int, peak_lr: float, warmup_steps: int, num_steps: int, schedule: str) -> float:
    """Learning rate for optimizer step `step` (0-based) of `num_steps`.

    Warmup: peak_lr * (step + 1) / warmup_steps for step < warmup_steps (the first step already
    moves). After warmup, with progress p = (step - warmup_steps) / (num_steps - warmup_steps) in
    [0, 1): "constant" peak_lr; "linear" peak_lr * (1 - p); "cosine" peak_lr * (1 + cos(pi p)) / 2.
    """
    if not 0 <= step < num_steps:
        raise ValueError(f"step {step} is outside [0, num_steps={num_steps})")
    if step < warmup_steps:
        return peak_lr * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, num_steps - warmup_steps)
    if schedule == "constant":
        return peak_lr
    if schedule == "linear":
        return peak_lr * (1.0 - progress)
    if schedule == "cosine":
        return peak_lr * 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"schedule must be 'cosine', 'constant' or 'linear', got {schedule!r}")
