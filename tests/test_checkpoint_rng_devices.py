"""A checkpoint's CUDA RNG states restored on the devices that exist (issue 67 item 3).

`capture_rng_state` saves one CUDA generator state per visible GPU; a run resumed where fewer are
visible (8-GPU checkpoint on a 2-GPU node, or the NCCL layout where ranks see n of n+1 GPUs) must
restore the first ones and leave the rest: torch's `set_rng_state_all` indexes past the device count.
A fake of torch.cuda's generators (one per device, IndexError past them, as `default_generators[i]`)
records what is restored, so this runs without a GPU.
"""

from __future__ import annotations

import pytest
import torch

from passband.training.checkpoint import capture_rng_state, restore_rng_state


@pytest.fixture
def fake_gpus(monkeypatch):
    """A machine with `count` GPUs as far as torch.cuda's RNG calls go; returns the restored {device: state}."""

    def install(count: int) -> dict[int, int]:
        restored: dict[int, int] = {}

        def set_rng_state(state, device="cuda"):
            index = torch.device(device).index if not isinstance(device, int) else device
            index = 0 if index is None else index
            if index >= count:  # torch.cuda.default_generators[index]
                raise IndexError("tuple index out of range")
            restored[index] = int(state[0])

        monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        monkeypatch.setattr(torch.cuda, "set_rng_state", set_rng_state)
        monkeypatch.setattr(torch.cuda.random, "set_rng_state", set_rng_state)
        return restored

    return install


def _saved_on(num_devices: int) -> dict:
    """A checkpoint's RNG state written where `num_devices` GPUs were visible: state i starts with byte i."""
    host = capture_rng_state()
    host.pop("cuda", None)
    return {**host, "cuda": [torch.full((16,), i, dtype=torch.uint8) for i in range(num_devices)]}


@pytest.mark.parametrize("visible", [2, 1])
def test_eight_device_states_restore_on_fewer_devices(fake_gpus, visible):
    restored = fake_gpus(visible)
    restore_rng_state(_saved_on(8))
    assert restored == {i: i for i in range(visible)}  # device i gets the state saved for device i


def test_fewer_saved_states_than_devices_restore_those_and_leave_the_rest(fake_gpus):
    restored = fake_gpus(4)
    restore_rng_state(_saved_on(2))
    assert restored == {0: 0, 1: 1}


def test_a_gpu_checkpoint_resumes_on_a_machine_without_one(fake_gpus):
    restored = fake_gpus(0)
    torch.manual_seed(123)
    state = _saved_on(8)
    expected = torch.rand(3)  # the draws that follow the saved state
    torch.manual_seed(7)
    restore_rng_state(state)
    assert restored == {}
    assert torch.equal(torch.rand(3), expected)  # the host's generator came back all the same
