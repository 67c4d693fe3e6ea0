"""The trainers' precision setting (SFT and RL), as types only: configs name it without loading torch.

What each value does is `training/sft/precision.py`'s business.
"""

from typing import Literal

PrecisionSetting = Literal["auto", "fp32", "bf16_autocast"]
"""What a config asks for; "auto" resolves per device (`training.sft.precision.resolve_precision`)."""
Precision = Literal["fp32", "bf16_autocast"]
"""A resolved setting."""
