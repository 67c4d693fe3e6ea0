"""LR schedule values by hand; the sampler's (epoch, cursor) state resumes without replay or skip."""

import math

import pytest

from passband.training.sft.sampler import SamplerState, StepSampler, count_steps, epoch_permutation
from passband.training.runtime.schedule import lr_at


def test_warmup_then_cosine_by_hand():
    # 2 warmup steps of 10: 0.5, 1.0; then p = (s-2)/8.
    assert lr_at(0, 1.0, 2, 10, "cosine") == pytest.approx(0.5)
    assert lr_at(1, 1.0, 2, 10, "cosine") == pytest.approx(1.0)
    assert lr_at(2, 1.0, 2, 10, "cosine") == pytest.approx(1.0)
    assert lr_at(6, 1.0, 2, 10, "cosine") == pytest.approx(0.5)  # p = 1/2: (1 + cos(pi/2))/2
    assert lr_at(9, 1.0, 2, 10, "cosine") == pytest.approx((1 + math.cos(math.pi * 7 / 8)) / 2)


def test_linear_and_constant_by_hand():
    assert [lr_at(s, 2.0, 0, 4, "linear") for s in range(4)] == pytest.approx([2.0, 1.5, 1.0, 0.5])
    assert [lr_at(s, 3e-4, 1, 3, "constant") for s in range(3)] == pytest.approx([3e-4, 3e-4, 3e-4])


def test_bad_schedule_and_step_are_refused():
    with pytest.raises(ValueError, match="got 'step'"):
        lr_at(0, 1.0, 0, 3, "step")
    with pytest.raises(ValueError, match="outside"):
        lr_at(3, 1.0, 0, 3, "cosine")


def test_steps_fill_batch_tokens_and_stop_at_epoch_end():
    lengths = [4, 4, 4, 4, 4]
    sampler = StepSampler(lengths, batch_tokens=9, seed=7)
    order0 = epoch_permutation(5, 7, 0)
    order1 = epoch_permutation(5, 7, 1)
    assert sampler.next_step() == order0[0:2]
    assert sampler.next_step() == order0[2:4]
    assert sampler.next_step() == order0[4:5]  # last step of the epoch is smaller
    assert sampler.state == SamplerState(1, 0)
    assert sampler.next_step() == order1[0:2]
    assert sorted(order0) == list(range(5)) and order0 != order1
    assert count_steps(lengths, 9, 7, num_epochs=2) == 6


def test_restart_from_state_continues_the_same_stream():
    lengths = [3, 5, 2, 7, 1, 4, 6, 2, 3]
    full = StepSampler(lengths, batch_tokens=10, seed=1)
    steps = [full.next_step() for _ in range(8)]
    first = StepSampler(lengths, batch_tokens=10, seed=1)
    head = [first.next_step() for _ in range(3)]
    resumed = StepSampler(lengths, batch_tokens=10, seed=1, state=first.state)
    tail = [resumed.next_step() for _ in range(5)]
    assert head + tail == steps
