"""One SamplingConfig (issue 28 item 4): every flow samples through it, pass rates add only top_k and
shard_size, a shard's sampling crosses into tasks/ typed, and RL stores its temperature once.

The presets' shard-key settings are compared with the values the old flat config gave, written out
by hand: equal settings give equal shard keys, hence equal shard seeds and equal samples."""

import pytest

from passband.flows.config import ConfigError, config_class, entry_class, resolve_config
from passband.flows.curate.config import CurateConfig
from passband.flows.evaluate.flow import EvaluateConfig
from passband.flows.pipeline.flow import PipelineConfig
from passband.flows.rl.config import RLConfig
from passband.flows.sample import SampleConfig
from passband.flows.sft import SFTConfig
from passband.tasks.sampling.passrate_job import ShardJob, ShardSampling
from passband.training.engines import EngineConfig, SamplingConfig
from passband.training.rl.config import RLAlgoConfig

FLOW_CONFIGS = (CurateConfig, EvaluateConfig, PipelineConfig, RLConfig, SampleConfig, SFTConfig)
SAMPLING_FIELDS = {"temperature", "top_p", "max_tokens", "stop"}


def _key(n: int, max_tokens: int, top_k: int = 1) -> dict:
    """A shard key's settings as the old flat pass-rate config spelled them (vLLM, bf16, T=1), the
    dtype as `auto` decides it here (bf16 where it is native, so there the key is the old one)."""
    return {"n": n, "top_k": top_k, "temperature": 1.0, "top_p": 1.0, "max_tokens": max_tokens, "stop": [],
            "seed": 0, "engine_kind": "vllm", "engine_dtype": EngineConfig().resolved_dtype()}


def _keys(config: CurateConfig) -> tuple[dict, dict, dict]:
    """(pass rates, corrections, synthetic answers) as their shards' keys hash them."""
    return (config.shard_sampling(config.pass_rate.sampling, config.pass_rate.top_k).key_fields(),
            config.shard_sampling(config.correction.sampling, 1).key_fields(),
            config.shard_sampling(config.synthetic.sampling, 1).key_fields())


@pytest.mark.parametrize(("preset", "max_tokens", "n"), [
    ("demo", 128, (8, 8, 4)), ("smoke", 96, (8, 4, 2)), ("gpu", 1024, (8, 8, 4)), ("recipe", 128, (5, 8, 4))])
def test_curate_presets_keep_their_shard_settings(preset, max_tokens, n):
    # old presets: pass_rate: {n, max_tokens}; correction / synthetic: {n} over pass_rate's max_tokens
    config = resolve_config(CurateConfig, "curate", preset)
    assert _keys(config) == tuple(_key(count, max_tokens) for count in n)
    assert config.pass_rate.shard_size == {"demo": 16, "smoke": 6, "gpu": 64, "recipe": 16}[preset]


def test_pipeline_curate_and_sft_selection_keep_their_shard_settings():
    demo = resolve_config(PipelineConfig, "pipeline", "demo").curate
    assert _keys(demo) == (_key(8, 128), _key(8, 128), _key(4, 128))
    recipe = resolve_config(PipelineConfig, "pipeline", "recipe").curate
    pass_rates = recipe.shard_sampling(recipe.pass_rate.sampling, recipe.pass_rate.top_k)
    assert pass_rates.key_fields() == _key(5, 128)
    assert pass_rates.with_draw(recipe.sft.selection_n).key_fields() == _key(16, 128)  # old {**key, n: 16, top_k: 1}


def test_the_key_base_seed_is_the_engine_seed_and_a_shard_is_seeded_by_its_key():
    config = CurateConfig(engine=EngineConfig(seed=7, kind="hf", dtype="float32"))
    sampling = config.shard_sampling(config.pass_rate.sampling, 3)
    assert sampling.key_fields() == {**_key(4, 128, top_k=3), "seed": 7, "engine_kind": "hf", "engine_dtype": "float32"}
    shard = sampling.for_shard("passrate/00000000002a" + "f" * 52)
    assert shard.sampling.seed == 42  # the key's first 12 hex digits
    assert shard.attempts() == SamplingConfig(n=12, temperature=1.0, max_tokens=128, seed=42)  # n * top_k


def test_a_curate_sampling_seed_is_refused_naming_the_setting():
    with pytest.raises(ConfigError, match=r"correction\.sampling\.seed is 3: each shard is seeded by its key"):
        resolve_config(CurateConfig, "curate", "smoke", None, ["correction.sampling.seed=3"])
    with pytest.raises(ConfigError, match=r"pass_rate\.sampling\.ignore_eos"):
        resolve_config(CurateConfig, "curate", "smoke", None, ["pass_rate.sampling.ignore_eos=true"])


def test_a_shard_job_carries_its_sampling_typed():
    sampling = ShardSampling(sampling=SamplingConfig(n=2, max_tokens=8, seed=5), top_k=2, engine_kind="hf",
                             engine_dtype="float32")
    job = ShardJob(key="passrate/abc", rows=[], model_ref="m", engine=EngineConfig(), sampling=sampling,
                   verifiers={}, system_prompt=None, manifest_config={})
    back = ShardJob.model_validate_json(job.model_dump_json())
    assert isinstance(back.sampling, ShardSampling) and back.sampling == sampling


def _config_classes(model, seen):
    for field in model.model_fields.values():
        for found in (config_class(field.annotation), entry_class(field.annotation)):
            if found is not None and found not in seen:
                seen.add(found)
                _config_classes(found, seen)
    return seen


def test_only_sampling_config_declares_sampling_fields():
    classes = set().union(*(_config_classes(model, {model}) for model in FLOW_CONFIGS))
    assert SamplingConfig in classes
    owners = {(cls.__name__, name) for cls in classes if cls is not SamplingConfig
              for name in SAMPLING_FIELDS & set(cls.model_fields)}
    # seq_sum's constant divisor (a length budget of the loss, which a run may set apart from the rollouts')
    assert owners == {("RLAlgoConfig", "max_tokens")}


def test_rl_stores_its_temperature_once():
    assert "temperature" not in RLAlgoConfig.model_fields
    with pytest.raises(ConfigError, match=r"algo\.temperature: Extra inputs are not permitted"):
        resolve_config(RLConfig, "rl", "smoke", None, ["algo.temperature=0.7"])
    assert resolve_config(RLConfig, "rl", "demo").sampling.temperature == 1.0


def test_the_rollout_batch_carries_the_sampling_temperature():
    from passband.training.engines.protocol import Sample
    from passband.training.rl.batches.batching import build_rollout_batch

    samples = [[Sample(prompt_index=0, sample_index=i, token_ids=[2], text="", logprobs=[-0.5], finish_reason="stop",
                       prompt_token_ids=[1]) for i in range(2)]]
    batch = build_rollout_batch(samples, [[1.0, 0.0]], [[True, True]], ["math"], temperature=0.7)
    assert batch.temperature == 0.7
