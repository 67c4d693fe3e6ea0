"""The memory model applied to the shipped configs (flows/memory_check.py), `passband doctor`'s
estimate, and the settings of one GPU shared by trainer and engine: sleep mode and weights in memory."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from passband.cli.main import load_flow, main
from passband.flows.config import resolve_config
from passband.flows.rl.config import RLConfig
from passband.flows.memory_check import Estimate, Target, estimates
from passband.training.engines.config import EngineConfig
from passband.training.memory_model import GIB

GPU_80 = Target("cuda", 80 * GIB)


def config_of(flow: str, preset: str | None, overrides: list[str] | None = None):
    return resolve_config(load_flow(flow)[1], flow, preset, (), overrides or [])


@pytest.mark.parametrize(("flow", "preset"), [("rl", "gpu"), ("rl", "gpu-lora"), ("sft", "gpu"), ("pipeline", "gpu"),
                                              ("pipeline", "gpu-lora")])
def test_gpu_presets_fit_one_80_gib_gpu(flow: str, preset: str) -> None:
    """Every trainer of the gpu presets fits one 80 GiB GPU by the memory model, the engine beside it
    (asleep during RL's update: in process on CUDA), in bf16 autocast as `precision: auto` runs on CUDA."""
    found = list(estimates(config_of(flow, preset), target=GPU_80))
    assert found and all(isinstance(e, Estimate) for e in found), found
    for estimate in found:
        assert estimate.fit.fits, estimate.report()
        assert "bf16_autocast" in estimate.assumptions
        if estimate.where == "rl":
            assert "asleep while training" in estimate.assumptions


def test_rl_gpu_preset_by_hand() -> None:
    """rl/gpu on 80 GiB, Qwen2.5-1.5B (1,543,714,304 parameters): 16 bytes each of weights, gradients and AdamW;
    activations of 8 x 4096 tokens with checkpointing; the engine's 40% beside the persistent state."""
    (estimate,) = estimates(config_of("rl", "gpu"), target=GPU_80)
    n = 1_543_714_304
    assert estimate.shape.parameters == n
    memory = estimate.trainer
    assert (memory.weights, memory.gradients, memory.optimizer, memory.reference) == (4 * n, 4 * n, 8 * n, 0)
    per_token = 28 * 4 * 1536 + (30 * 1536 + 8 * 8960 + 4 * 256 + 4 * 12 + 8) + 8 * 1536 + 8 * 128 + 12
    assert memory.activations == 8 * 4096 * per_token
    assert estimate.fit.phases["rollout"] == 12 * n + int(0.4 * 80 * GIB)


def test_a_7b_full_fine_tune_does_not_fit_80_gib() -> None:
    """Qwen2.5-7B without LoRA: 16 bytes x 7.6B parameters alone are 113 GiB."""
    config = config_of("rl", "gpu", ["model=Qwen/Qwen2.5-7B-Instruct"])
    (estimate,) = estimates(config, target=GPU_80)
    assert not estimate.fit.fits
    assert estimate.problem().startswith("rl: Qwen/Qwen2.5-7B-Instruct needs about ")


def test_doctor_prints_the_estimate_for_a_gpu() -> None:
    result = CliRunner().invoke(main, ["doctor", "rl", "--preset", "gpu-lora", "--gpu-gib", "80"])
    assert result.exit_code == 0, result.output
    assert "memory (a 80 GiB GPU):" in result.output
    assert "rl: Qwen/Qwen2.5-7B-Instruct, 7.616B parameters" in result.output
    assert "fits: " in result.output and "of the cuda device's 80.0 GiB" in result.output
    small = CliRunner().invoke(main, ["doctor", "rl", "--preset", "gpu-lora", "--gpu-gib", "24"])
    assert small.exit_code == 0 and "DOES NOT FIT" in small.output, small.output


def test_shipped_cpu_presets_fit_here() -> None:
    """The demo and smoke presets pass the preflight's memory check on this machine (they run in CI)."""
    for flow in ("rl", "sft", "pipeline"):
        for preset in ("smoke", "demo"):
            for estimate in estimates(config_of(flow, preset)):
                assert isinstance(estimate, Estimate) and estimate.fit.fits, (flow, preset, estimate)


def test_sleep_mode_is_for_cuda() -> None:
    assert EngineConfig(in_process=True).sleeps_while_training(cuda=True)
    assert not EngineConfig(in_process=False).sleeps_while_training(cuda=True)
    assert not EngineConfig(in_process=True).sleeps_while_training(cuda=False)
    assert not EngineConfig(in_process=True, sleep_while_training=False).sleeps_while_training(cuda=True)
    with pytest.raises(ValueError, match="sleep_while_training: true needs CUDA"):
        EngineConfig(sleep_while_training=True).sleeps_while_training(cuda=False)


@pytest.mark.parametrize(("overrides", "missing"), [
    (["engine.in_process=false"], "engine.in_process: true"),
    (["rollout.max_off_policy_steps=1"], "rollout.max_off_policy_steps: 0"),
    (["distributed.nproc_per_node=2"], "one trainer process"),
    (["engine.kind=hf"], "engine.kind: vllm"),
])
def test_weights_in_memory_need_the_engine_in_process(overrides: list[str], missing: str) -> None:
    from passband.flows.config import ConfigError

    assert config_of("rl", "demo", ["engine.weight_transfer=memory"]).engine.weight_transfer == "memory"
    with pytest.raises(ConfigError, match=f"weight_transfer: memory needs .*{missing}"):
        config_of("rl", "demo", ["engine.weight_transfer=memory", *overrides])
    assert isinstance(config_of("rl", "demo"), RLConfig)


def test_a_stage_placed_on_a_work_pool_is_left_to_it() -> None:
    """`passband run pipeline` with SFT placed on a GPU pool: SFT's misfit on this machine is a note, not
    a refusal (it runs there); RL, which runs here, is still checked."""
    from passband.flows.memory_check import memory_check

    too_big = ["model=Qwen/Qwen2.5-7B-Instruct", "sft.stages.0.device=cpu", "sft.stages.0.precision=fp32",
               "sft.stages.0.micro_batch_tokens=1048576", "sft.stages.0.batch_tokens=1048576", "rl.algo.device=cpu",
               "rl.algo.precision=fp32", "rl.algo.micro_batch_size=64", "rl.engine.max_model_len=8192"]
    problems, _ = memory_check(config_of("pipeline", None, too_big))
    assert [p.split(":")[0] for p in problems] == ["sft.stages.0", "rl"]
    problems, notes = memory_check(config_of("pipeline", None, [*too_big, "placement.sft=passband-gpu"]))
    assert [p.split(":")[0] for p in problems] == ["rl"]
    assert "sft.stages.0: runs on work pool 'passband-gpu', not checked here" in notes[0]


def test_rollouts_on_workers_leave_the_trainer_its_device() -> None:
    """With rollout.workers: task_workers the engines are the workers': the rollout phase holds the trainer's
    persistent state alone."""
    (local,) = estimates(config_of("rl", "gpu"), target=GPU_80)
    (workers,) = estimates(config_of("rl", "gpu", ["rollout.workers=task_workers", "engine.weight_transfer=disk"]),
                           target=GPU_80)
    assert workers.fit.phases["rollout"] == workers.trainer.persistent == local.trainer.persistent
    assert local.fit.phases["rollout"] == local.trainer.persistent + int(0.4 * 80 * GIB)
