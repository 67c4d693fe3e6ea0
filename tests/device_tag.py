"""A second device on a CPU-only machine, for tests: the model "on `meta`", computing on the CPU.

CI has no GPU, and on one real device every tensor sits on the same one, so a batch tensor the
trainer forgot to move (`torch.tensor(rows)` left on the host while the model is on CUDA) passes
every CPU test. Here the model's parameters and buffers become `OnDevice` tensors: they report
`device == meta` but hold their real CPU values. `DeviceTagMode` runs every aten op on those values
and tags its outputs, so the step runs to the end with real numbers (an `.item()` is answered, a
data-dependent branch takes its real path) while every op's inputs are checked: an op that mixes an
`OnDevice` tensor with a host tensor of one or more dimensions is recorded in `mode.mixed`, the
error CUDA would raise (or the silent host-to-device copy it would make, as for index tensors).
0-dim host tensors are allowed, as CUDA allows them (AdamW's step counter is one). A tensor made
directly "on" the device from Python data (`torch.tensor(rows, device=device)`) is a real meta
tensor without values: torch builds it without going through the mode, so it cannot be tagged and
is recorded too (`torch.tensor(rows).to(device)` moves it through the mode).
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

TAG = torch.device("meta")


class OnDevice(torch.Tensor):
    """A CPU tensor that says it lives on `TAG` (a wrapper subclass, as FakeTensor and DTensor are)."""

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> "OnDevice":
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, strides=inner.stride(), dtype=inner.dtype,
                                                   device=TAG, requires_grad=inner.requires_grad)

    def __init__(self, inner: torch.Tensor) -> None:
        self.inner = inner

    def __repr__(self) -> str:
        return f"OnDevice({self.inner!r})"

    def tolist(self) -> list:  # torch refuses tolist() on subclasses; on CUDA it is one copy to the host
        return self.inner.tolist()

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise RuntimeError(f"{func} on an OnDevice tensor outside DeviceTagMode")


def _is_tag(device: object) -> bool:
    return device is not None and torch.device(device) == TAG


class DeviceTagMode(TorchDispatchMode):
    """Runs every op on the real values, tags what the device computes, records mixed-device ops."""

    def __init__(self) -> None:
        super().__init__()
        self.mixed: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        on_device = any(isinstance(t, OnDevice) for t in tensors)
        valueless = [t for t in tensors if not isinstance(t, OnDevice) and t.device == TAG]
        host = [t for t in tensors if not isinstance(t, OnDevice) and t.device != TAG and t.dim() > 0]
        if valueless:
            self.mixed.append(f"{func}: a tensor made on the device without its values, shapes "
                              f"{[tuple(t.shape) for t in valueless]}")
        if on_device and host:
            self.mixed.append(f"{func}: host tensors of shapes {[tuple(t.shape) for t in host]} "
                              "beside the model's device")
        leaves = func is torch.ops.aten._to_copy.default and kwargs.get("device") is not None and not _is_tag(
            kwargs["device"])
        arrives = _is_tag(kwargs.get("device"))

        def unwrap(x: object) -> object:
            if isinstance(x, OnDevice):
                return x.inner
            if isinstance(x, torch.device) and x == TAG:
                return torch.device("cpu")
            return x

        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs))
        if (on_device or arrives) and not leaves:
            return tree_map(lambda x: OnDevice(x) if type(x) is torch.Tensor else x, out)
        return out


def to_tag(module: torch.nn.Module) -> torch.nn.Module:
    """`module` with every parameter and buffer tagged, in place (call it inside a `DeviceTagMode`)."""
    tagged: dict[int, torch.nn.Parameter] = {}  # by the original's id: tied weights stay one parameter
    for sub in module.modules():
        for name, param in list(sub._parameters.items()):
            if param is not None:
                if id(param) not in tagged:
                    tagged[id(param)] = torch.nn.Parameter(OnDevice(param.detach()), requires_grad=param.requires_grad)
                sub._parameters[name] = tagged[id(param)]
        for name, buffer in list(sub._buffers.items()):
            if buffer is not None:
                sub._buffers[name] = OnDevice(buffer)
    return module


def values(tensor: torch.Tensor) -> torch.Tensor:
    """The CPU values of a tagged tensor (a plain one unchanged)."""
    return tensor.inner if isinstance(tensor, OnDevice) else tensor
