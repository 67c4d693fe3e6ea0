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
