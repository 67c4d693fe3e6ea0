"""RL learning-rate warmup and schedule (issue 53 item 3): SFT's `lr_at`, stepped by the optimizer's own count."""

import copy

import pytest
import torch
from test_rl_update import REWARDS, _batch, _tiny_model

from passband.training.rl.config import RLAlgoConfig
from passband.training.rl.update import build_optimizer, rl_update


@pytest.mark.parametrize("settings, factors", [
    # Warmup 2 (1/2, 2/2), then linear over 4: progress 0, 1/4, 2/4, 3/4; then held at the last value.
    ({"lr_warmup_steps": 2, "lr_schedule": "linear", "lr_decay_steps": 4}, [0.5, 1.0, 1.0, 0.75, 0.5, 0.25, 0.25]),
    # Cosine over 2 without warmup: (1 + cos 0) / 2, (1 + cos pi/2) / 2, held.
    ({"lr_schedule": "cosine", "lr_decay_steps": 2}, [1.0, 0.5, 0.5]),
    # Constant with warmup 4.
    ({"lr_warmup_steps": 4}, [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]),
    ({}, [1.0, 1.0]),
])
def test_factors_by_hand(settings, factors):
    config = RLAlgoConfig(**settings)
    assert [config.lr_factor(step) for step in range(len(factors))] == pytest.approx(factors)


@pytest.mark.parametrize("settings", [{"lr_schedule": "linear"}, {"lr_schedule": "cosine"}, {"lr_decay_steps": 10}])
def test_decay_steps_go_with_a_decaying_schedule(settings):
    with pytest.raises(ValueError, match="lr_decay_steps"):
        RLAlgoConfig(**settings)


def _run(model, optimizer, batch, config, num_updates):
    return [rl_update(model, None, optimizer, batch, config)["lr"] for _ in range(num_updates)]


SCHEDULED = {"precision": "fp32", "lr": 1e-3, "lr_warmup_steps": 2, "lr_schedule": "linear", "lr_decay_steps": 2}


def test_updates_step_the_rate_and_a_resumed_run_sets_the_same_rates():
    model = _tiny_model()
    batch = _batch(model, REWARDS)
    config = RLAlgoConfig(**SCHEDULED)
    straight = copy.deepcopy(model)
    lrs = _run(straight, build_optimizer(straight, config), batch, config, 4)
    # Warmup 1/2, 2/2; linear over 2: progress 0, then 1/2; the fifth step would hold 1/2.
    assert lrs == pytest.approx([5e-4, 1e-3, 1e-3, 5e-4])

    # Two updates, a checkpoint (weights and optimizer state), a fresh trainer loaded from it, two more.
    first = copy.deepcopy(model)
    optimizer = build_optimizer(first, config)
    resumed_lrs = _run(first, optimizer, batch, config, 2)
    saved = copy.deepcopy((first.state_dict(), optimizer.state_dict()))
    resumed = copy.deepcopy(model)
    resumed.load_state_dict(saved[0])
    resumed_optimizer = build_optimizer(resumed, config)  # built at lr, as a resumed run builds it
    resumed_optimizer.load_state_dict(saved[1])
    resumed_lrs += _run(resumed, resumed_optimizer, batch, config, 2)
    assert resumed_lrs == lrs
    assert all(torch.equal(a, b) for a, b in zip(straight.parameters(), resumed.parameters()))


def test_the_inner_steps_count_and_a_constant_rate_leaves_the_optimizer_alone():
    model = _tiny_model()
    batch = _batch(model, REWARDS)
    config = RLAlgoConfig(**SCHEDULED, num_inner_steps=2)
    assert _run(model, build_optimizer(model, config), batch, config, 2) == pytest.approx([1e-3, 5e-4])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    assert _run(model, optimizer, batch, RLAlgoConfig(precision="fp32"), 1) == [0.1]
