"""`engine.dtype: auto`: bf16 where the machine multiplies in bf16 natively, fp32 where it only emulates
it (scripts/bench_engine_dtype.py: 44 against 225 tok/s on an AVX2-only EPYC); explicit dtypes as written."""

from pathlib import Path

import torch

from passband.flows.curate.config import CurateConfig
from passband.training.engines import EngineConfig


def _cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def test_explicit_dtypes_are_kept():
    assert EngineConfig(dtype="bfloat16").resolved_dtype() == "bfloat16"
    assert EngineConfig(dtype="float32").resolved_dtype() == "float32"
    assert EngineConfig().dtype == "auto"


def test_auto_follows_the_cpu_flags_read_independently():
    assert not torch.cuda.is_available()  # the CPU suite; on CUDA auto is bf16
    flags = _cpu_flags()
    resolved = EngineConfig().resolved_dtype()
    if not any(flag.startswith("avx512") or flag.startswith("amx") for flag in flags):
        assert resolved == "float32", "an AVX2-only CPU emulates bf16: auto must pick fp32"
    if {"avx512_bf16", "amx_bf16"} & flags:
        assert resolved == "bfloat16", "a CPU with bf16 instructions: auto must pick bf16"
    assert resolved in ("bfloat16", "float32")


def test_auto_decides_on_cuda_and_on_native_cpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert EngineConfig().resolved_dtype() == "bfloat16"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    assert EngineConfig().resolved_dtype() == "bfloat16"
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    assert EngineConfig().resolved_dtype() == "float32"


def test_the_pass_rate_shard_key_holds_the_dtype_the_engine_runs_in(monkeypatch):
    """Shards sampled in fp32 and in bf16 differ, so their keys do; auto is keyed by what it decided."""
    config = CurateConfig()
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    fp32 = config.shard_sampling(config.pass_rate.sampling, 1).key_fields()
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    bf16 = config.shard_sampling(config.pass_rate.sampling, 1).key_fields()
    assert (fp32["engine_dtype"], bf16["engine_dtype"]) == ("float32", "bfloat16")
    assert {k: v for k, v in fp32.items() if k != "engine_dtype"} == {k: v for k, v in bf16.items() if k != "engine_dtype"}
