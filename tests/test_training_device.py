"""Everything in an SFT step and an RL update lives on the model's device (issue 50, "must show").

The model runs "on `meta`" (tests/device_tag.py: tagged tensors that compute on the CPU), so a batch
tensor left on the host, or an index built without the model's device, is caught as it would be on a
GPU, and the step still runs to the end with real numbers, which must equal the plain CPU run's to
float rounding (torch picks some kernels by device type, SDPA's among them, so not bit for bit).
"""

from __future__ import annotations

import copy

import pytest
import torch

from device_tag import DeviceTagMode, to_tag, values
from test_rl_update import REWARDS, _batch, _tiny_model
from test_sft_train_step import _examples
from tiny_chat_model import PAD, tiny_llama
from passband.training.rl.config import RLAlgoConfig
from passband.training.rl.update import rl_update
from passband.training.runtime.device import fused_on, resolve_device
from passband.training.sft.loop import train_step
from passband.training.sft.model_loss import PackedLMLoss


@pytest.fixture(autouse=True)
def _autocast_of_the_tag_device(monkeypatch):
    """torch.autocast knows no `meta` device type; the tagged tensors compute on the CPU, so theirs is the CPU's."""
    autocast = torch.autocast
    monkeypatch.setattr(torch, "autocast", lambda device_type, *args, **kwargs: autocast(
        "cpu" if device_type == "meta" else device_type, *args, **kwargs))


def _sft_step(model: torch.nn.Module) -> dict[str, float]:
    loss = PackedLMLoss(model, chunk_size=7)
    return train_step(loss, _examples(), max_length=24, micro_batch_tokens=24, pad_id=PAD,
                      device=next(model.parameters()).device)


def test_sft_step_keeps_every_tensor_on_the_model_device():
    on_cpu = tiny_llama(seed=4)
    expected = _sft_step(on_cpu)
    model = tiny_llama(seed=4)
    with DeviceTagMode() as mode:
        to_tag(model)
        metrics = _sft_step(model)
    assert not mode.mixed, "\n".join(mode.mixed[:3])
    # Not bit for bit: torch picks SDPA's kernel by device type, and `meta` gets the math kernel.
    assert metrics == pytest.approx(expected, rel=1e-6)
    for (name, param), cpu_param in zip(model.named_parameters(), on_cpu.parameters()):
        torch.testing.assert_close(values(param.grad), cpu_param.grad, rtol=1e-5, atol=1e-6, msg=name)


CONFIGS = [
    {},  # the default: fused scoring, zero-gradient rows skipped
    {"kl_coef": 0.3, "kl_placement": "loss", "kl_estimator": "k2", "cov_method": "kl_cov", "cov_fraction": 0.2,
     "skip_zero_gradient_rows": False},
    {"kl_coef": 0.1, "kl_placement": "reward", "num_inner_steps": 2, "cov_method": "clip_cov", "cov_fraction": 0.3,
     "correction": "token_tis", "drop_zero_variance_groups": True},
]


@pytest.mark.parametrize("extras", CONFIGS)
def test_rl_update_keeps_every_tensor_on_the_model_device(extras):
    model = _tiny_model()
    batch = _batch(model, REWARDS, valid=[True, True, True, False, True, True, True, True], engine_noise=0.05)
    cfg = RLAlgoConfig(precision="fp32", micro_batch_size=3, lr=0.01, **extras)

    def update(policy, reference):
        # AdamW's moments live on the device too; eps = 1 makes its step ~lr * gradient, so the float
        # rounding between the two runs stays rounding (at 1e-8 a near-zero gradient's sign is +-lr).
        optimizer = torch.optim.AdamW(policy.parameters(), lr=cfg.lr, eps=1.0)
        return rl_update(policy, reference, optimizer, batch, cfg, torch.Generator().manual_seed(0))

    on_cpu = copy.deepcopy(model)
    expected = update(on_cpu, _tiny_model(seed=5) if cfg.kl_coef > 0 else None)
    tagged = copy.deepcopy(model)
    with DeviceTagMode() as mode:
        to_tag(tagged)
        reference = to_tag(_tiny_model(seed=5)) if cfg.kl_coef > 0 else None
        metrics = update(tagged, reference)
    assert not mode.mixed, "\n".join(mode.mixed[:3])
    timings = ("seconds", "train_tokens_per_s")
    # Equal to float rounding: torch's composite ops pick their kernels by device type, and `meta`'s differ.
    assert {k: v for k, v in metrics.items() if k not in timings} == pytest.approx(
        {k: v for k, v in expected.items() if k not in timings}, rel=1e-4, abs=1e-6)
    for (name, param), cpu_param in zip(tagged.named_parameters(), on_cpu.parameters()):
        torch.testing.assert_close(values(param), cpu_param, rtol=1e-5, atol=1e-6, msg=name)


def test_the_check_catches_a_tensor_left_on_the_host():
    model = tiny_llama(seed=4)
    with DeviceTagMode() as mode:
        to_tag(model)
        model(input_ids=torch.tensor([[1, 2, 3]]), use_cache=False)  # never moved to the model's device
    assert mode.mixed and "host tensors of shapes [(1, 3)]" in mode.mixed[0]


def test_device_setting_resolves_in_one_place(monkeypatch):
    assert resolve_device("cpu") == torch.device("cpu")
    assert fused_on(torch.device("cpu")) == {}  # CPU AdamW as it always was: same results
    assert fused_on(torch.device("cuda")) == {"fused": True}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ValueError, match="device='cuda' but torch sees no CUDA device on this machine"):
        resolve_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert resolve_device("auto") == torch.device("cuda", 1)  # a torchrun rank's own GPU
