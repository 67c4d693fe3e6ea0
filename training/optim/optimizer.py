"""The trainer's optimizer from an OptimizerConfig: torch's AdamW, or Muon and AdamW in one Optimizer.

`MuonAdamW` is one torch.optim.Optimizer with two param groups, Muon's first and AdamW's second, so what
trainers do with an optimizer keeps working: clip, step, zero_grad, state_dict / load_state_dict, DCP's
get/set_optimizer_state_dict (sharded checkpoints, resharded on resume), and a schedule that sets each
group's lr (`set_scheduled_lr`). Its state per parameter: Muon's matrices {"step", "momentum_buffer"} (one
buffer, a DTensor shard under FSDP2 like the weight), AdamW's {"step", "exp_avg", "exp_avg_sq"}, torch's
AdamW's own keys, stepped by torch's functional AdamW, so that group trains bit for bit as torch.optim.AdamW.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from passband.training.optim.config import OptimizerConfig
from passband.training.optim.groups import split_parameters
from passband.training.optim.muon import apply_update, momentum_update, update_scale
from passband.training.optim.newton_schulz import newton_schulz
from passband.training.optim.parallel import orthogonalize

ADAMW_EPS = 1e-8
"""torch.optim.AdamW's default eps, which the trainers use today."""


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's part of a DTensor (a view: writing to it writes the DTensor), or the tensor itself."""
    from torch.distributed.tensor import DTensor

    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


class MuonAdamW(torch.optim.Optimizer):
    """Muon on `muon_params` (2-D hidden matrices), AdamW on `adamw_params`; each group's settings in its dict:
    Muon's lr, weight_decay, momentum, nesterov, ns_steps, ns_coefficients, ns_dtype, update_scale,
    matrices_per_rank; AdamW's lr, betas, eps, weight_decay, fused."""

    def __init__(self, muon_params: list[torch.nn.Parameter], adamw_params: list[torch.nn.Parameter],
                 config: OptimizerConfig, lr: float, weight_decay: float, betas: tuple[float, float],
                 fused: bool = False) -> None:
        for parameter in muon_params:
            if parameter.ndim != 2:
                raise ValueError(f"Muon trains 2-D matrices; got a parameter of shape {tuple(parameter.shape)}")
        muon_group = {
            "params": muon_params, "use_muon": True,
            "lr": config.lr or lr,
            "weight_decay": weight_decay if config.weight_decay is None else config.weight_decay,
            "momentum": config.momentum, "nesterov": config.nesterov, "ns_steps": config.newton_schulz_steps,
            "ns_coefficients": config.newton_schulz_coefficients, "ns_dtype": config.newton_schulz_dtype,
            "update_scale": config.update_scale, "matrices_per_rank": config.matrices_per_rank,
        }
        adamw_group = {
            "params": adamw_params, "use_muon": False,
            "lr": config.adamw_lr or lr, "betas": config.adamw_betas or betas, "eps": ADAMW_EPS,
            "weight_decay": weight_decay if config.adamw_weight_decay is None else config.adamw_weight_decay,
            "fused": fused,
        }
        super().__init__([muon_group, adamw_group], {})

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:
        if closure is not None:
            raise ValueError("MuonAdamW.step takes no closure: run forward and backward before it")
        for group in self.param_groups:
            if group["use_muon"]:
                self._muon_step(group)
            else:
                self._adamw_step(group)

    def _muon_step(self, group: dict[str, Any]) -> None:
        parameters = [p for p in group["params"] if p.grad is not None]
        updates = []
        for parameter in parameters:
            state = self.state[parameter]
            if not state:
                state["step"] = torch.tensor(0.0)
                state["momentum_buffer"] = torch.zeros_like(parameter)  # a DTensor shard under FSDP2
            state["step"] += 1  # read by the RL trainer's schedule, as AdamW's
            updates.append(momentum_update(_local(state["momentum_buffer"]), _local(parameter.grad),
                                           group["momentum"], group["nesterov"]))
        dtype = getattr(torch, group["ns_dtype"])
        orthogonal = orthogonalize(
            parameters, updates, lambda matrix: newton_schulz(matrix, group["ns_steps"], group["ns_coefficients"], dtype),
            dtype, group["matrices_per_rank"])
        for parameter, update in zip(parameters, orthogonal):
            apply_update(_local(parameter), update, group["lr"], update_scale(tuple(parameter.shape), group["update_scale"]),
                         group["weight_decay"])

    def _adamw_step(self, group: dict[str, Any]) -> None:
        from torch.optim.adamw import adamw

        parameters = [p for p in group["params"] if p.grad is not None]
        for parameter in parameters:
            state = self.state[parameter]
            if not state:  # torch.optim.AdamW's initial state: the step on the device only when fused
                state["step"] = (torch.zeros((), dtype=torch.float32, device=parameter.device) if group["fused"]
                                 else torch.tensor(0.0, dtype=torch.float32))
                state["exp_avg"] = torch.zeros_like(parameter, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(parameter, memory_format=torch.preserve_format)
        states = [self.state[p] for p in parameters]
        adamw(parameters, [p.grad for p in parameters], [s["exp_avg"] for s in states],
              [s["exp_avg_sq"] for s in states], [], [s["step"] for s in states],
              fused=group["fused"] or None, amsgrad=False, beta1=group["betas"][0], beta2=group["betas"][1],
              lr=group["lr"], weight_decay=group["weight_decay"], eps=group["eps"], maximize=False)


def build_optimizer(model: torch.nn.Module, config: OptimizerConfig, lr: float, weight_decay: float,
                    betas: tuple[float, float] = (0.9, 0.999), fused: bool = False) -> torch.optim.Optimizer:
    """The optimizer over `model`'s trainable parameters (sharded or not): torch.optim.AdamW for `adamw`, exactly
    as the trainers build it today; MuonAdamW for `muon`. `lr`, `weight_decay`, `betas` are the trainer's own,
    taken where the config leaves a group's setting None; `fused`: AdamW's fused kernel (CUDA)."""
    if config.name == "adamw":
        parameters = [p for p in model.parameters() if p.requires_grad]
        return torch.optim.AdamW(parameters, lr=lr, betas=betas, weight_decay=weight_decay,
                                 **({"fused": True} if fused else {}))
    muon, adamw = split_parameters(model)
    return MuonAdamW([p for _, p in muon], [p for _, p in adamw], config, lr, weight_decay, betas, fused)


def peak_lrs(config: OptimizerConfig, lr: float) -> list[float]:
    """Each param group's peak rate, in `build_optimizer`'s group order, the trainer's peak being `lr`."""
    return [lr] if config.name == "adamw" else [config.lr or lr, config.adamw_lr or lr]


def set_scheduled_lr(optimizer: torch.optim.Optimizer, config: OptimizerConfig, lr: float,
                     schedule: Callable[[float], float]) -> None:
    """Set each group's rate to `schedule(peak)` of its own peak (`peak_lrs`; the trainer's being `lr`), so the
    groups keep their ratio through warmup and decay. The schedule takes the peak rather than returning a factor
    so that AdamW's one group gets exactly the float the trainer computed before (lr_at(step, lr, ...), not
    lr * (lr_at / lr)). The peaks come from the config, not the optimizer, so a resume follows today's settings."""
    for group, peak in zip(optimizer.param_groups, peak_lrs(config, lr), strict=True):
        group["lr"] = schedule(peak)


def optimizer_order_names(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """The names of `optimizer`'s parameters in its state_dict's index order (group by group): MuonAdamW's
    groups are not in `model.parameters()` order, and LoRA's optimizer holds the adapters only."""
    names = {id(parameter): name for name, parameter in model.named_parameters()}
    return [names[id(parameter)] for group in optimizer.param_groups for parameter in group["params"]]
