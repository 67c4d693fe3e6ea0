"""What a rerun reuses is keyed by what decides its bits (issue #56 item 3): the stage key, the pass-rate
shard key and the evaluation shard key change with the engine dtype (`auto` by what this machine makes
of it), split-KV attention and the fp32 LM head, and stay put where only the machine's view of an
explicit setting changes. Pure: no engine runs."""

from __future__ import annotations

import pytest
import torch

from passband.curation.catalog import VerifierSettings
from passband.flows.curate.config import CurateConfig
from passband.tasks.sampling.eval_shards import eval_shard_jobs
from passband.tasks.stages.cache import machine_choices, stage_key
from passband.training.engines import EngineConfig, SamplingConfig


def _native_bf16(monkeypatch: pytest.MonkeyPatch, native: bool) -> None:
    """This machine as a CPU with (AMX, AVX-512 BF16) or without (AVX2) native bf16 matmul."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: native)


def _curate(**engine) -> dict:
    return CurateConfig(engine=EngineConfig(**engine)).model_dump(mode="json")


def test_a_stage_left_to_auto_is_keyed_by_what_the_machine_decides(monkeypatch):
    _native_bf16(monkeypatch, False)
    avx2 = stage_key("curate", _curate())
    fp32_avx2 = stage_key("curate", _curate(dtype="float32"))
    _native_bf16(monkeypatch, True)
    assert stage_key("curate", _curate()) != avx2  # auto: fp32 there, bf16 here
    assert machine_choices(_curate()) == {"cuda": False, "cpu_native_bf16": True}
    # every such setting named: one key on every machine
    assert machine_choices(_curate(dtype="float32")) == {}
    assert stage_key("curate", _curate(dtype="float32")) == fp32_avx2


def test_a_trainer_left_to_auto_counts_too():
    assert machine_choices({"trainer": {"device": "cpu", "precision": "auto"}}) != {}
    assert machine_choices({"trainer": {"device": "cpu", "precision": "fp32"}, "engine": {"dtype": "float32"}}) == {}
    assert machine_choices({"stages": [{"precision": "auto"}]}) != {}


@pytest.mark.parametrize("setting", [{"dtype": "bfloat16"}, {"split_kv_attention": True}, {"lm_head_fp32": True}])
def test_the_stage_key_holds_the_engine_settings_that_move_bits(setting):
    assert stage_key("curate", _curate(**{"dtype": "float32", **setting})) != stage_key("curate", _curate(dtype="float32"))


def test_the_pass_rate_shard_key_holds_the_fp32_lm_head_only_when_on():
    """As split KV: the default's keys (and the stored shards' seeds) stay; the fp32 head gets shards of its own."""
    keys = [c.shard_sampling(c.pass_rate.sampling, 1).key_fields()
            for c in (CurateConfig(), CurateConfig(engine=EngineConfig(lm_head_fp32=True)))]
    assert "engine_lm_head_fp32" not in keys[0]
    assert keys[1] == {**keys[0], "engine_lm_head_fp32": True}


def test_an_eval_shard_left_to_auto_is_keyed_by_the_dtype_it_samples_in(monkeypatch):
    def key(engine: EngineConfig) -> str:
        rows = [{"id": "m-0", "task": "math", "prompt": "1+1?", "reference": "2", "subdomain": "all"}]
        return eval_shard_jobs({"math": rows}, "/models/m", "/models/m@0", engine, SamplingConfig(n=2),
                               VerifierSettings(), None, 8)[0].key

    _native_bf16(monkeypatch, False)
    assert key(EngineConfig()) == key(EngineConfig(dtype="float32"))
    _native_bf16(monkeypatch, True)
    assert key(EngineConfig()) == key(EngineConfig(dtype="bfloat16")) != key(EngineConfig(dtype="float32"))
    assert key(EngineConfig(split_kv_attention=True)) != key(EngineConfig())
