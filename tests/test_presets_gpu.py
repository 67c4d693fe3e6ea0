"""The gpu presets (flows/presets/<flow>/gpu.yaml): one 80 GB GPU and a 1-8B hub model.

Every engine they configure samples with CUDA graphs (no enforce_eager) and sizes its KV cache
from a fraction of the device: 0.85 where the engine has the GPU to itself, 0.4 for RL's, which
shares its process with the trainer. Every model they name is a hub name, the form
tasks/artifacts/model.py: resolve_model downloads. The CPU defaults the demo was measured with stay as they
were: the GPU settings live in these presets only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from passband.cli.main import FLOWS, load_flow
from passband.flows.config import resolve_config
from passband.training.engines.config import EngineConfig

HUB_MODEL = "Qwen/Qwen2.5-1.5B-Instruct"


def engines_in(value: Any, where: str = "") -> Iterator[tuple[str, EngineConfig]]:
    """(dotted path, engine config) of every EngineConfig nested anywhere in `value`."""
    if isinstance(value, EngineConfig):
        yield where, value
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from engines_in(getattr(value, name), f"{where}.{name}".lstrip("."))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from engines_in(item, f"{where}.{key}")


@pytest.mark.parametrize("flow", list(FLOWS))
def test_gpu_preset_engines_use_the_device(flow: str) -> None:
    _, config_cls = load_flow(flow)
    config = resolve_config(config_cls, flow, "gpu")
    engines = dict(engines_in(config))
    assert engines, flow
    for where, engine in engines.items():
        colocated = where == "engine" and flow == "rl" or where == "rl.engine"
        assert (engine.kind, engine.dtype, engine.enforce_eager, engine.kv_cache_gib) == (
            "vllm", "auto", False, None), f"{flow}: {where}"  # auto: bf16 on CUDA
        assert engine.memory_fraction == (0.4 if colocated else 0.85), f"{flow}: {where}"
        assert engine.max_model_len == 4096, f"{flow}: {where}"


@pytest.mark.parametrize("flow", list(FLOWS))
def test_gpu_preset_names_a_hub_model(flow: str) -> None:
    _, config_cls = load_flow(flow)
    dumped = resolve_config(config_cls, flow, "gpu").model_dump(mode="json")
    models = [dumped["model"], *(stage["model"] for stage in dumped.values() if isinstance(stage, dict)
                                 and "model" in stage)]
    assert set(models) == {HUB_MODEL}, flow
    assert dumped.get("baseline", HUB_MODEL) == HUB_MODEL


def test_cpu_engine_defaults_are_the_demos() -> None:
    engine = EngineConfig()
    assert (engine.enforce_eager, engine.memory_fraction, engine.kv_cache_gib) == (True, 0.3, 2.0)
    _, pipeline_cls = load_flow("pipeline")
    demo = resolve_config(pipeline_cls, "pipeline", "demo")
    assert all(engine.enforce_eager for _, engine in engines_in(demo))


def test_rl_gpu_lora_preset_trains_adapters_of_a_7b_model_in_one_process() -> None:
    """flows/presets/rl/gpu-lora.yaml: rl/gpu's mix with adapters on a 7-8B model, colocated with the engine,
    which serves each version's adapter; its lr 10x rl/gpu's full-parameter one (the anchor's RL finding)."""
    from passband.flows.rl.config import RLConfig

    full, lora = (resolve_config(RLConfig, "rl", preset) for preset in ("gpu", "gpu-lora"))
    assert lora.model == "Qwen/Qwen2.5-7B-Instruct" and lora.datasets == full.datasets
    assert lora.algo.lora is not None and lora.algo.lora.rank == 16 and lora.publishes_adapter
    assert lora.algo.lr == pytest.approx(10 * full.algo.lr)
    assert lora.distributed.nproc_per_node == 1 and lora.engine.in_process and lora.engine.kind == "vllm"
    assert (lora.engine.kv_cache_gib, lora.engine.enforce_eager, lora.engine.memory_fraction) == (None, False, 0.45)


def test_pipeline_gpu_lora_preset_adapts_every_training_stage() -> None:
    """flows/presets/pipeline/gpu-lora.yaml: pipeline/gpu with a 7-8B model, SFT's stages and RL on adapters."""
    from passband.flows.pipeline.flow import PipelineConfig

    full, lora = (resolve_config(PipelineConfig, "pipeline", preset) for preset in ("gpu", "gpu-lora"))
    assert lora.model == "Qwen/Qwen2.5-7B-Instruct" and lora.rl.model == lora.sft.model == lora.model
    assert [stage.lora.rank for stage in lora.sft.stages] == [64, 64]
    assert [b.lr for b in lora.sft.stages] == pytest.approx([10 * a.lr for a in full.sft.stages])
    assert lora.rl.algo.lora is not None and lora.rl.publishes_adapter
    assert lora.rl.datasets == full.rl.datasets and lora.rl.eval is None
