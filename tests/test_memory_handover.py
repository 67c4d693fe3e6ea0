"""The memory model charges the trainer's reserved memory beside the engine where the trainer does not
release it (issue 67 item 6): without a release, torch keeps the update's freed blocks reserved (its peak)
while the engine samples; with it (the synchronous loop's hand-over) only the persistent state stays."""

from __future__ import annotations

from passband.training.memory_model import TrainerMemory, colocated_fit

# persistent 10 + 4 + 2 = 16; peak 16 + gradients 4 + copies 1 + activations 20 + logits 3 = 44
TRAINER = TrainerMemory(weights=10, gradients=4, optimizer=4, reference=2, autocast_copies=1, activations=20, logits=3)


def test_a_trainer_that_releases_leaves_its_persistent_state_beside_the_engine():
    fit = colocated_fit(TRAINER, engine=50, device="gpu", device_bytes=100, engine_sleeps=True, trainer_releases=True)
    assert fit.phases == {"training": 44, "rollout": 16 + 50}


def test_a_trainer_that_keeps_its_cache_is_charged_its_peak_beside_the_engine():
    fit = colocated_fit(TRAINER, engine=50, device="gpu", device_bytes=100, engine_sleeps=False, trainer_releases=False)
    assert fit.phases == {"training": 44 + 50, "rollout": 44 + 50}
    assert fit.fits is True
    assert colocated_fit(TRAINER, 60, "gpu", 100, False, trainer_releases=False).fits is False  # 104 > 100
