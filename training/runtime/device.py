"""Where a trainer runs (SFT and RL): the one place that reads the `device` setting.

Everything below the trainer follows the model: a function that builds a tensor takes the model's
device (`next(model.parameters()).device`, `model.lm_head.weight.device`) and never asks torch
what hardware exists. Batches are built on the host and moved once; metrics come back once per step.
"""

from __future__ import annotations

import os

import torch

from passband.training.runtime.settings import DeviceSetting


def resolve_device(setting: DeviceSetting) -> torch.device:
    """"auto": CUDA when torch sees a GPU, else the CPU; "cuda" without one is refused in one line.

    Under torchrun the CUDA device is the rank's own (LOCAL_RANK: torchrun starts one rank per GPU).
    """
    problem = device_problem(setting)
    if problem is not None:
        raise ValueError(problem)
    if setting == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))


def device_problem(setting: DeviceSetting) -> str | None:
    """Why `setting` cannot run here, in one line (device: cuda on a machine without one), else None:
    the preflight reports it beside its other problems instead of failing on the first."""
    if setting == "cuda" and not torch.cuda.is_available():
        return ("device='cuda' but torch sees no CUDA device on this machine "
                f"(torch {torch.__version__}); set device: auto or cpu")
    return None


def fused_on(device: torch.device) -> dict[str, bool]:
    """AdamW's keyword for `device`: the fused kernel on CUDA (one launch for every parameter's
    update instead of a handful per tensor); on the CPU torch's default, so CPU results stay as they were."""
    return {"fused": True} if device.type == "cuda" else {}


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory of the trainer's device: CUDA's peak allocated, else the process's peak RSS (Linux: KiB)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

