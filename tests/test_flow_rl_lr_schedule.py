"""A resumed RL run continues the learning-rate warmup where the stopped one left it (issue 53 item 3):
the step is the optimizer's own count, which the checkpoint keeps."""

import torch
from test_flow_rl import _state, _tiny_config, _weights, digit_task, harness  # noqa: F401  (harness: a fixture)

from passband.flows.rl.flow import rl


def _warmup_config(tmp_path, **overrides):
    config = _tiny_config(tmp_path, **overrides)
    # Two iterations of one step each under a warmup of 2: rates lr/2 then lr; eval off (not what is tested).
    return config.model_copy(update={"algo": config.algo.model_copy(update={"lr_warmup_steps": 2}), "eval": None})


def test_resumed_run_sets_the_warmup_rate_of_the_uninterrupted_one(harness, tmp_path, monkeypatch):
    digit_task(tmp_path, monkeypatch, "test-rl-lr-resume")
    monkeypatch.setenv("PASSBAND_ARTIFACT_ROOT", str(tmp_path / "root_a"))
    full = rl(_warmup_config(tmp_path))
    monkeypatch.setenv("PASSBAND_ARTIFACT_ROOT", str(tmp_path / "root_b"))
    assert rl(_warmup_config(tmp_path, max_iterations_this_run=1)).status == "partial"
    resumed = rl(_warmup_config(tmp_path))

    def rates(summary):
        final = summary.outputs["checkpoint"]
        return [_state(final.replace("iter-000002", f"iter-{i:06d}"))["metrics"]["lr"] for i in (1, 2)]

    assert rates(full) == rates(resumed) == [5e-3, 1e-2]
    full_weights, resumed_weights = _weights(full.outputs["checkpoint"]), _weights(resumed.outputs["checkpoint"])
    assert all(torch.equal(full_weights[name], resumed_weights[name]) for name in full_weights)
