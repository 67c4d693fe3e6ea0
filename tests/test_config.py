"""Config layering: defaults < preset < file < --set, and errors that name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from passband.curation.catalog import task
from passband.flows.config import ConfigError, deep_merge, parse_override, preset_names, resolve_config
from passband.flows.sample import SampleConfig


def test_parse_override_nests_and_parses_yaml_scalars() -> None:
    assert parse_override("sampling.n=8") == {"sampling": {"n": 8}}
    assert parse_override("engine.kind=hf") == {"engine": {"kind": "hf"}}
    assert parse_override("sampling.stop=[END, '###']") == {"sampling": {"stop": ["END", "###"]}}
    assert parse_override("problems.path=") == {"problems": {"path": ""}}
    with pytest.raises(ConfigError, match="key=value"):
        parse_override("sampling.n")
    with pytest.raises(ConfigError, match="empty key"):
        parse_override("sampling..n=3")


def test_deep_merge_keeps_siblings() -> None:
    base = {"a": {"x": 1, "y": 2}, "b": 3}
    assert deep_merge(base, {"a": {"y": 5}}) == {"a": {"x": 1, "y": 5}, "b": 3}
    assert base == {"a": {"x": 1, "y": 2}, "b": 3}  # not mutated


def test_layers_apply_in_order(tmp_path: Path) -> None:
    assert SampleConfig().sampling.n == 4
    smoke = resolve_config(SampleConfig, "sample", "smoke")
    assert smoke.problems.num_problems == 8 and smoke.sampling.max_tokens == 64
    user = tmp_path / "user.yaml"
    user.write_text("sampling: {max_tokens: 32, temperature: 0.6}\n")
    layered = resolve_config(SampleConfig, "sample", "smoke", user, ["sampling.temperature=0.7"])
    assert layered.sampling.max_tokens == 32  # file beats preset
    assert layered.sampling.temperature == 0.7  # --set beats file
    assert layered.problems.num_problems == 8  # preset survives where nothing overrides it


def test_a_partial_nested_config_keeps_what_its_parent_chose() -> None:
    """RL's engine default sets kv_cache_gib="batch" and in_process=True over EngineConfig's class
    defaults (2.0 and False); overriding another engine field must keep both, here and through
    the pipeline, whose `rl` holds the same default."""
    from passband.flows.pipeline.flow import PipelineConfig
    from passband.flows.rl.config import RLConfig

    rl = resolve_config(RLConfig, "rl", None, None, ["engine.release_weights_while_training=false"])
    assert (rl.engine.kv_cache_gib, rl.engine.in_process, rl.engine.release_weights_while_training) == \
        ("batch", True, False)
    assert rl.engine.dtype == "auto"  # a class default stays a class default
    rl = resolve_config(RLConfig, "rl", None, None, ["engine.in_process=false"])
    assert (rl.engine.kv_cache_gib, rl.engine.in_process) == ("batch", False)  # --set still wins
    pipeline = resolve_config(PipelineConfig, "pipeline", "demo", None, ["rl.engine.dtype=float32"])
    assert (pipeline.rl.engine.kv_cache_gib, pipeline.rl.engine.in_process, pipeline.rl.engine.dtype) == \
        ("batch", True, "float32")


def test_prefect_parameters_keep_what_a_nested_default_chose() -> None:
    """A run started from the Prefect UI or API validates its JSON parameters through Prefect, not
    resolve_config: a partial `engine` there must keep RL's choices too."""
    from passband.flows.rl.flow import rl

    parameters = rl.validate_parameters({"config": {"engine": {"release_weights_while_training": False},
                                                    "algo": {"micro_batch_size": 4}}})
    config = parameters["config"]
    assert (config.engine.kv_cache_gib, config.engine.in_process, config.engine.release_weights_while_training) == \
        ("batch", True, False)
    assert (config.algo.lr, config.algo.micro_batch_size) == (5e-6, 4)  # RL's lr, not RLAlgoConfig's 1e-6


def test_bad_values_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"sampling\.n: Input should be greater than or equal to 1"):
        resolve_config(SampleConfig, "sample", None, None, ["sampling.n=0"])
    with pytest.raises(ConfigError, match=r"sampling\.temprature: Extra inputs are not permitted"):
        resolve_config(SampleConfig, "sample", None, None, ["sampling.temprature=0.5"])
    with pytest.raises(ConfigError, match=r"engine\.kind"):
        resolve_config(SampleConfig, "sample", None, None, ["engine.kind=tgi"])
    # a union (str | ProblemSource) names the key, not pydantic's union members
    from passband.flows.rl.config import RLConfig

    with pytest.raises(ConfigError) as error:
        resolve_config(RLConfig, "rl", None, None, ["datasets.math.num_problems=0"])
    assert str(error.value) == ("invalid rl config: datasets.math.num_problems: Input should be greater than or "
                                "equal to 1; datasets.math.num_problems: Input should be 'all'")
    with pytest.raises(ConfigError, match="no preset 'nope'.*demo, gpu, smoke"):
        resolve_config(SampleConfig, "sample", "nope")


def test_every_flow_ships_smoke_demo_and_gpu_presets_that_validate() -> None:
    from passband.cli.main import FLOWS, load_flow

    for name in FLOWS:
        assert {"smoke", "demo", "gpu"} <= set(preset_names(name)), name
        _, config_cls = load_flow(name)
        for preset in preset_names(name):
            resolve_config(config_cls, name, preset)


def test_field_docstrings_become_descriptions() -> None:
    schema = SampleConfig.model_json_schema()
    sampling = schema["$defs"]["SamplingConfig"]["properties"]
    assert sampling["n"]["description"] == "Samples per prompt."
    assert "description" in schema["properties"]["kl_subsample"]


def test_recipe_presets_carry_the_published_settings():
    """docs/recipe.md: GSPO (sequence ratio, sequence mean) with the reference's clip range, S = 2,
    seq-MIS at C = 2, no KL; pass rates from n = 5, SFT selection from its own 16 samples. The
    pipeline's recipe preset repeats rl/recipe and curate/recipe and must not drift from them."""
    import warnings

    from passband.flows.curate.flow import CurateConfig
    from passband.flows.pipeline.flow import PipelineConfig
    from passband.flows.rl.flow import RLConfig

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the recipe does not warn about itself (scripts/sequence_clip.py)
        rl = resolve_config(RLConfig, "rl", "recipe")
        pipeline = resolve_config(PipelineConfig, "pipeline", "recipe")
    curate = resolve_config(CurateConfig, "curate", "recipe")
    algo = rl.algo
    assert (algo.level, algo.aggregation, algo.clip_low, algo.clip_high) == ("sequence", "seq_mean", 0.28, 0.40)
    assert (algo.num_inner_steps, algo.correction, algo.correction_threshold, algo.kl_coef) == (2, "seq_mis", 2.0, 0.0)
    assert (curate.pass_rate.sampling.n, curate.sft.selection_n) == (5, 16)
    assert [str(t.default_band) for t in (task("math"), task("code"), task("ifeval"))] == ["(0, 0.8]", "(0, 0.8]", "(0, 0.4]"]
    assert pipeline.rl.algo == rl.algo and pipeline.rl.reward == rl.reward
    assert (pipeline.curate.pass_rate.sampling.n, pipeline.curate.sft.selection_n) == (5, 16)
    assert pipeline.rl.datasets["math"] == "@recurate.rl_math"  # the pipeline's own wiring survives
