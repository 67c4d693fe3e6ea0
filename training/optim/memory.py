"""Optimizer state bytes by parameter shape, for the memory model and `doctor` (no model needed).

AdamW keeps two moments per weight (exp_avg, exp_avg_sq); Muon one momentum buffer per hidden matrix, and its
AdamW group two moments for the rest. Each optimizer's per-tensor step counter (one scalar) is left out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from passband.training.optim.config import OptimizerConfig
from passband.training.optim.groups import uses_muon


def optimizer_state_bytes(param_shapes: Mapping[str, tuple[int, ...]], config: OptimizerConfig,
                          bytes_per_element: int = 4) -> int:
    """Bytes of optimizer state for the trainable parameters `param_shapes` (name -> shape, a tied head once)
    under `config`, each state element `bytes_per_element` (4: fp32, the state's dtype follows the fp32
    master weights). Under N sharded ranks each rank holds about 1/N of it."""
    total = 0
    for name, shape in param_shapes.items():
        buffers = 1 if config.name == "muon" and uses_muon(name, tuple(shape)) else 2
        total += buffers * math.prod(shape) * bytes_per_element
    return total
