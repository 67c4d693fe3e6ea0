"""The one overflow guard of the RL library: every `exp` of a log-ratio goes through `exp_ratio`.

A float32 `exp` overflows to inf above ~88.7. One token whose trainer and engine (or policy and
reference) log-probs differ by that much, e.g. a token the engine sampled at probability 1e-40,
turns a ratio into inf; inf * 0 (advantage 0, a rejected row, the clipped branch's zero
gradient) is NaN, and one NaN poisons the whole step. Clamping the log-ratio to
[-MAX_LOG_RATIO, MAX_LOG_RATIO] first bounds every ratio by e^20 ~ 4.9e8 (finite, and with
room to square it in float32), far outside every clip range and cap, so no ratio that any
objective or correction actually uses is changed. Where the clamp binds, its gradient is 0:
such a token is clipped, capped or rejected anyway.
"""

import torch
from torch import Tensor

MAX_LOG_RATIO = 20.0


def exp_ratio(log_ratio: Tensor) -> Tensor:
    """exp(min(log_ratio, MAX_LOG_RATIO)), elementwise, any shape."""
    return torch.exp(log_ratio.clamp(max=MAX_LOG_RATIO))
