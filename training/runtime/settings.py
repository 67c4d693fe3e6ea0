"""The trainers' precision and device settings (SFT and RL), as types only: configs name them
without loading torch.

What each value does is `training/runtime/precision.py`'s and `training/runtime/device.py`'s business.
"""

from typing import Literal

PrecisionSetting = Literal["auto", "fp32", "bf16_autocast"]
"""What a config asks for; "auto" resolves per device (`training.runtime.precision.resolve_precision`)."""
Precision = Literal["fp32", "bf16_autocast"]
"""A resolved setting."""
DeviceSetting = Literal["auto", "cpu", "cuda"]
"""Where a trainer runs; "auto" is CUDA when present (`training.runtime.device.resolve_device`)."""
