"""A model that ships its own code (issue 71): refused without `engine.trust_remote_code`, loaded with it by
the hf engine, the RL trainer and meta-device init with the same logits, sized by the memory model, and its
code version in the stage cache keys (tests/custom_code_model.py builds it: Llama with a squared-ReLU MLP).
With it, vLLM serves it inside the trainer's process too (RL's default engine) from a folder of its own name, so
its patched classes are not the trainer's; LoRA finds its targets on the architecture or refuses the names it
lacks. The pipeline on it: test_model_code_pipeline.py."""

from __future__ import annotations

from pathlib import Path

import time

import pytest
import torch
import yaml
from click.testing import CliRunner

from custom_code_model import CODE_FILES, twisted_model
from test_cli_errors import fails_in_one_line  # one `Error:` line, exit 2, no traceback
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


def test_the_refusal_comes_in_the_first_second_of_a_run(twisted_dir: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Imports aside (the first call pays them; `passband run` in a shell pays them once too), the refusal costs
    reading config.json: no model, tokenizer, engine or dataset is touched first."""
    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / "home"))
    fails_in_one_line("run", "pipeline", "--preset", "smoke", "--set", f"model={twisted_dir}")  # the imports
    start = time.perf_counter()
    line = fails_in_one_line("run", "pipeline", "--preset", "smoke", "--set", f"model={twisted_dir}")
    seconds = time.perf_counter() - start
    assert line.startswith("preflight: curate.model, sft.model, rl.model, evaluate.model: model "), line
    assert line.endswith("set engine.trust_remote_code: true") and "modeling_twisted.py" in line
    assert seconds < 1.0, f"refused after {seconds:.2f} s: something was loaded first"


def test_rl_takes_the_model_on_its_default_engine_in_the_trainers_process(twisted_dir: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / "home"))
    printed = CliRunner().invoke(main, ["config", "rl", "--preset", "smoke", "--set", f"model={twisted_dir}",
                                        "--set", "engine.trust_remote_code=true"])
    assert printed.exit_code == 0, printed.output
    engine = yaml.safe_load(printed.stdout)["engine"]
    assert (engine["kind"], engine["in_process"], engine["trust_remote_code"]) == ("vllm", True, True)


def test_the_engines_own_folder_gives_it_classes_of_its_own(twisted_dir: Path) -> None:
    """What lets vLLM's transformers backend decorate the model's classes in the trainer's process: transformers
    imports a folder's code once per folder name, so the engine's copy under another name has classes that are
    not the trainer's, computing the same logits."""
    from passband.training.engines.vllm_engine import _own_code_folder
    from passband.training.model_source import load_causal_lm

    in_process = EngineConfig(kind="vllm", trust_remote_code=True, in_process=True)
    for config in (EngineConfig(kind="vllm", trust_remote_code=True), EngineConfig(kind="hf", trust_remote_code=True),
                   EngineConfig(kind="vllm", in_process=True)):  # own processes, no vLLM, or no opt-in: no copy
        assert _own_code_folder(twisted_dir, config) is None
    holder = _own_code_folder(twisted_dir, in_process)
    folder = Path(holder.name) / "twisted0-vllm-engine"
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in twisted_dir.iterdir())
    assert all((folder / p.name).resolve() == p.resolve() for p in twisted_dir.iterdir())
    trainers, engines = load_causal_lm(twisted_dir, trust_remote_code=True), load_causal_lm(folder, trust_remote_code=True)
    assert type(trainers).__name__ == type(engines).__name__ == "TwistedLlamaForCausalLM"
    assert type(engines) is not type(trainers) and type(engines.model) is not type(trainers.model)
    with torch.no_grad():
        assert torch.equal(engines(IDS).logits, trainers(IDS).logits)
    holder.cleanup()
    assert not folder.exists()


def test_the_docs_custom_model_yaml_validates_on_such_a_model(twisted_dir: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/your-data.md's custom-model.yaml, its model pointed at the twisted folder: `passband config` takes it
    as written, and refuses it, naming the stage, when one stage lacks the opt-in."""
    from doc_blocks import fenced_blocks

    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / "home"))
    page = (Path(__file__).resolve().parents[1] / "docs" / "your-data.md").read_text()
    (text,) = [body for kind, body in fenced_blocks(page) if kind == "yaml" and body.startswith("# custom-model.yaml")]
    data = yaml.safe_load(text)
    assert data["model"] == "/models/my-custom-model"
    (tmp_path / "custom-model.yaml").write_text(yaml.safe_dump({**data, "model": str(twisted_dir)}))
    printed = CliRunner().invoke(main, ["config", "pipeline", "--config", str(tmp_path / "custom-model.yaml")])
    assert printed.exit_code == 0, printed.output
    resolved = yaml.safe_load(printed.stdout)
    assert all(resolved[stage]["engine"]["trust_remote_code"] for stage in ("curate", "sft", "rl", "evaluate"))
    without = {**data, "model": str(twisted_dir), "rl": {}}  # one stage without the opt-in is refused, named
    (tmp_path / "without.yaml").write_text(yaml.safe_dump(without))
    line = fails_in_one_line("config", "pipeline", "--config", str(tmp_path / "without.yaml"))
    assert line.startswith("preflight: rl.model: model ") and line.endswith("set engine.trust_remote_code: true")


def test_lora_finds_its_targets_on_the_architecture_or_refuses_names_it_lacks(twisted_dir: Path) -> None:
    """peft adapts linear layers found by type: 'all-linear' covers the custom architecture's projections
    whatever they are called (never its LM head); a name it lacks, or an architecture whose projections are
    not linear layers, is refused in one line naming what it has."""
    from passband.training.lora.adapters import adapter_targets, attach_adapters
    from passband.training.lora.settings import LoraConfig
    from passband.training.model_source import load_causal_lm

    model = load_causal_lm(twisted_dir, trust_remote_code=True)
    projections = ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]
    expected = sorted(f"model.layers.{i}.{'self_attn' if p[0] in 'qkvo' else 'mlp'}.{p}"
                      for i in range(2) for p in projections)
    assert adapter_targets(model, "all-linear") == expected  # 2 layers x 7 projections, no lm_head
    assert adapter_targets(model, ["q_proj", "v_proj"]) == [n for n in expected if n.endswith(("q_proj", "v_proj"))]
    with pytest.raises(ValueError, match=r"^lora.target_modules \['wq'\] match no linear layer of "
                                         r"TwistedLlamaForCausalLM, whose linear layers end in \['down_proj', "):
        attach_adapters(model, LoraConfig(target_modules=["q_proj", "wq"]), seed=0)
    # adapters on the custom model start as the model itself (B = 0): its own logits, not plain Llama's
    with torch.no_grad():
        before = model(IDS).logits
        attach_adapters(model, LoraConfig(rank=4), seed=0)
        assert torch.equal(model(IDS).logits, before)
    assert sum(name.endswith("lora_A.default.weight") for name, _ in model.named_parameters()) == 14

    class Projection(torch.nn.Module):  # a custom code's own projection: a weight, not a torch Linear
        def __init__(self, linear: torch.nn.Linear) -> None:
            super().__init__()
            self.weight = linear.weight

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ self.weight.T

    custom = load_causal_lm(twisted_dir, trust_remote_code=True)
    for name, module in list(custom.named_modules()):
        if isinstance(module, torch.nn.Linear) and module is not custom.lm_head:
            parent, _, leaf = name.rpartition(".")
            setattr(custom.get_submodule(parent), leaf, Projection(module))
    with pytest.raises(ValueError, match=r"^lora.target_modules: all-linear finds no linear layer in "
                                         r"TwistedLlamaForCausalLM .*: name the modules to adapt in "
                                         r"lora.target_modules$"):
        attach_adapters(custom, LoraConfig(), seed=0)


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


@pytest.mark.slow  # two vLLM start-ups on the CPU (~1.5 min each on 2 shared cores)
@pytest.mark.parametrize("in_process", [True, False], ids=["in-process", "own-processes"])
def test_vllm_serves_the_architecture_it_lacks_beside_the_trainer(twisted_dir: Path, in_process: bool) -> None:
    """vLLM has no TwistedLlama: with trust_remote_code it resolves TransformersForCausalLM, which runs the
    folder's modeling_twisted.py; its log-probs are the twisted model's (plain Llama's differ by ~5e-2). In the
    trainer's process (RL's default) the trainer's model, loaded first, still computes its own logits and
    gradients after the engine started: served from the folder itself, vLLM's compile decorator on the shared
    class broke it."""
    from passband.training.engines.config import SamplingConfig
    from passband.training.engines.open import open_engine
    from passband.training.model_source import load_causal_lm

    model = load_causal_lm(twisted_dir, trust_remote_code=True)
    with torch.no_grad():
        before = model(IDS).logits
    engine = open_engine(EngineConfig(kind="vllm", dtype="float32", trust_remote_code=True, kv_cache_gib=0.1,
                                      max_model_len=256, max_num_seqs=4, in_process=in_process), twisted_dir)
    prompt = [5, 6, 7, 8]
    sample = engine.generate([prompt], SamplingConfig(n=1, max_tokens=4, temperature=0, ignore_eos=True))[0][0]
    ids = torch.tensor([prompt + list(sample.token_ids)])
    logits = model(ids).logits  # with autograd, as the trainer's update runs it
    logits.logsumexp(-1).sum().backward()
    engine.close()
    with torch.no_grad():
        assert torch.equal(model(IDS).logits, before)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    logprobs = torch.log_softmax(logits[0].detach(), -1)
    expected = [logprobs[len(prompt) - 1 + i, token].item() for i, token in enumerate(sample.token_ids)]
    assert sample.logprobs == pytest.approx(expected, abs=1e-4)


def test_the_recipe_12b_preset_is_the_recipe_on_its_own_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """flows/presets/pipeline/recipe-12b.yaml: the recipe's published settings (as tests/test_config.py checks
    the 135M recipe presets), SFT's context growing 16K -> 32K -> 64K with Muon, the recipe's instruct model by
    hub id with its code opted into on every stage; `passband config`
    validates it with no network and no download (the model's config.json is not in the cache here)."""
    from passband.flows.config import resolve_config
    from passband.flows.pipeline.flow import PipelineConfig

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / "home"))
    config = resolve_config(PipelineConfig, "pipeline", "recipe-12b")
    assert config.model == "Motif-Technologies/Motif-2-12.7B-Instruct"
    stages = {"curate": config.curate, "sft": config.sft, "rl": config.rl, "evaluate": config.evaluate}
    assert {name: stage.engine.trust_remote_code for name, stage in stages.items()} == dict.fromkeys(stages, True)
    assert {name: stage.model for name, stage in stages.items()} == dict.fromkeys(stages, config.model)
    assert (config.curate.pass_rate.sampling.n, config.curate.sft.selection_n) == (5, 16)
    algo = config.rl.algo
    assert (algo.level, algo.aggregation, algo.clip_low, algo.clip_high) == ("sequence", "seq_mean", 0.28, 0.40)
    assert (algo.num_inner_steps, algo.correction, algo.correction_threshold, algo.kl_coef) == (2, "seq_mis", 2.0, 0.0)
    assert config.rl.reward.mask_truncated
    assert [stage.max_length for stage in config.sft.stages] == [16384, 32768, 65536]
    assert {stage.optimizer.name for stage in config.sft.stages} == {algo.optimizer.name} == {"muon"}
    assert config.sft.distributed.nproc_per_node == config.rl.distributed.nproc_per_node == 8
    printed = CliRunner().invoke(main, ["config", "pipeline", "--preset", "recipe-12b"])
    assert printed.exit_code == 0, printed.output
    assert yaml.safe_load(printed.stdout)["model"] == "Motif-Technologies/Motif-2-12.7B-Instruct"
