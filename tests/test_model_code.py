"""A model that ships its own code (issue 71): refused without `engine.trust_remote_code`, loaded with it by
the hf engine, the RL trainer and meta-device init with the same logits, sized by the memory model, and its
code version in the stage cache keys (tests/custom_code_model.py builds it: Llama with a squared-ReLU MLP)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from click.testing import CliRunner

from custom_code_model import CODE_FILES, twisted_model
from passband.cli.main import main
from passband.training.engines.config import EngineConfig

IDS = torch.tensor([[5, 72, 101, 108, 108, 111, 258, 97]])


@pytest.fixture(scope="module")
def twisted_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return twisted_model(tmp_path_factory.mktemp("twisted"))


def test_passband_config_refuses_the_model_without_the_opt_in_in_one_line(twisted_dir: Path) -> None:
    refused = CliRunner().invoke(main, ["config", "evaluate", "--set", f"model={twisted_dir}"])
    assert refused.exit_code == 2, refused.output
    lines = [line for line in refused.output.splitlines() if line.startswith(("Error", "preflight"))]
    assert len(lines) == 1, refused.output
    assert str(twisted_dir) in lines[0] and "configuration_twisted.py, modeling_twisted.py" in lines[0]
    assert "engine.trust_remote_code" in lines[0]
    allowed = CliRunner().invoke(main, ["config", "evaluate", "--set", f"model={twisted_dir}",
                                        "--set", "engine.trust_remote_code=true"])
    assert allowed.exit_code == 0, allowed.output
    assert yaml.safe_load(allowed.stdout)["engine"]["trust_remote_code"] is True


def test_a_pipeline_names_every_stage_that_loads_it_in_one_line(twisted_dir: Path) -> None:
    from passband.flows.pipeline.flow import PipelineConfig
    from passband.tasks.steps.preflight import preflight

    problems = preflight(PipelineConfig(model=str(twisted_dir))).problems
    assert len(problems) == 1
    assert problems[0].startswith("curate.model, sft.model, rl.model, evaluate.model: model ")


def test_the_hf_engine_and_the_rl_trainer_run_the_models_code_with_equal_logits(twisted_dir: Path) -> None:
    from transformers import LlamaForCausalLM

    from passband.training.engines.hf_engine import HFEngine
    from passband.training.rl.config import RLAlgoConfig
    from passband.training.rl.trainer import open_trainer

    with pytest.raises(ValueError, match="custom code"):  # transformers' own refusal, below ours
        HFEngine(twisted_dir, EngineConfig(kind="hf", dtype="float32"))
    engine = HFEngine(twisted_dir, EngineConfig(kind="hf", dtype="float32", trust_remote_code=True))
    trainer = open_trainer(twisted_dir, ["math"], RLAlgoConfig(device="cpu", precision="fp32"), trust_remote_code=True)
    assert type(engine.model).__name__ == type(trainer.model).__name__ == "TwistedLlamaForCausalLM"
    with torch.no_grad():
        engine_logits = engine.model(IDS).logits.float()
        trainer_logits = trainer.model(IDS).logits.float()
        # the same weights as plain Llama (SiLU): the twist is real, so loading the code matters
        as_llama = LlamaForCausalLM.from_pretrained(str(twisted_dir), attn_implementation="eager")(IDS).logits
    assert torch.allclose(engine_logits, trainer_logits, atol=1e-5, rtol=0)
    assert (engine_logits - as_llama).abs().max() > 1e-2


def test_meta_init_builds_the_models_own_architecture(twisted_dir: Path) -> None:
    from passband.training.runtime.meta_init import empty_causal_lm

    model = empty_causal_lm(twisted_dir, trust_remote_code=True)
    assert type(model).__name__ == "TwistedLlamaForCausalLM"
    assert all(parameter.is_meta for parameter in model.parameters())
    assert type(model.model.layers[0].mlp.act_fn).__name__ == "SquaredReLU"


def test_the_memory_model_reads_the_custom_configs_sizes(twisted_dir: Path) -> None:
    from passband.training.memory_model import ModelShape
    from passband.training.model_shapes import model_shape

    assert model_shape(str(twisted_dir)) == ModelShape(hidden=256, layers=2, intermediate=512, heads=4, kv_heads=2,
                                                       vocab=259, head_dim=64, tied_embeddings=True)


def test_an_edit_to_the_models_code_changes_every_stage_key(tmp_path: Path) -> None:
    from passband.tasks.artifacts.model import model_code_versions
    from passband.tasks.stages.cache import stage_key
    from passband.tasks.steps.sft import sft_stage_key
    from passband.training.model_source import model_code_files
    from passband.training.sft.config import StageConfig

    model = twisted_model(tmp_path / "twisted")
    assert model_code_files(model) == CODE_FILES
    config = {"model": str(model), "engine": {"trust_remote_code": True}}
    pipeline = {"curate": {"model": "smollm2-135m-instruct"}, "evaluate": {"baseline": str(model)}}
    stage = StageConfig(name="s", datasets={"a.jsonl": 1.0}, max_length=64, lr=1e-4, batch_tokens=128,
                        micro_batch_tokens=64, num_steps=1)
    before = stage_key("evaluate", config), stage_key("pipeline", pipeline), sft_stage_key(stage, {}, str(model), "f")
    modeling = model / "modeling_twisted.py"
    modeling.write_text(modeling.read_text().replace("torch.relu(x).square()", "torch.relu(x).square() * 0.5"))
    after = stage_key("evaluate", config), stage_key("pipeline", pipeline), sft_stage_key(stage, {}, str(model), "f")
    assert all(b != a for b, a in zip(before, after))
    # a model without code adds nothing: the shipped model's keys stay what they were
    assert model_code_versions({"model": "smollm2-135m-instruct", "rl": {"model": "file:///x/y"}}) == {}


@pytest.mark.slow  # vLLM's start-up on the CPU (~1.5 min on 2 shared cores)
def test_vllm_serves_the_architecture_it_lacks_through_its_transformers_backend(twisted_dir: Path) -> None:
    """vLLM has no TwistedLlama: with trust_remote_code it resolves TransformersForCausalLM, which runs the
    folder's modeling_twisted.py; its log-probs are the twisted model's (plain Llama's differ by ~5e-2)."""
    from passband.training.engines.config import SamplingConfig
    from passband.training.engines.open import open_engine
    from passband.training.model_source import load_causal_lm

    settings = dict(kind="vllm", dtype="float32", trust_remote_code=True, kv_cache_gib=0.1, max_model_len=256,
                    max_num_seqs=4)
    # in this process vLLM's transformers backend would patch the model's own classes under the trainer
    with pytest.raises(ValueError, match=r"engine.in_process: vLLM would patch \['TwistedLlamaForCausalLM'\]"):
        open_engine(EngineConfig(**settings, in_process=True), twisted_dir)
    model = load_causal_lm(twisted_dir, trust_remote_code=True)
    engine = open_engine(EngineConfig(**settings, in_process=False), twisted_dir)
    prompt = [5, 6, 7, 8]
    sample = engine.generate([prompt], SamplingConfig(n=1, max_tokens=4, temperature=0, ignore_eos=True))[0][0]
    engine.close()
    ids = torch.tensor([prompt + list(sample.token_ids)])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(ids).logits[0], -1)
    expected = [logprobs[len(prompt) - 1 + i, token].item() for i, token in enumerate(sample.token_ids)]
    assert sample.logprobs == pytest.approx(expected, abs=1e-4)
