"""RL continuing a LoRA checkpoint's adapter (`algo.lora.start: continue`, the pipeline's way of handing SFT's
adapter to RL): the policy starts as the checkpoint's merged weights on the adapter's own base, the reference is
that base, the run's adapter stays on the original base, and every mismatch is refused in one line."""

import json

import pytest
import torch
from mlflow import MlflowClient
from prefect.testing.utilities import prefect_test_harness
from safetensors.torch import load_file
from tiny_chat_model import tiny_llama, tiny_tokenizer

from passband.tasks.artifacts.model import lora_adapter_base
from passband.tasks.artifacts.store import fetch_artifact
from passband.training.lora.adapters import adapter_state, adapters_disabled
from passband.training.rl.config import RLAlgoConfig
from passband.training.rl.trainer import load_policy, open_trainer, save_trainer
from test_flow_rl import _tiny_config, digit_task
from test_lora import IDS, _randomize_b


def _lora_checkpoint(tmp_path, rank=2, alpha=32.0):
    """A base model dir and a LoRA checkpoint on it whose adapters moved (B nonzero): what SFT with lora writes."""
    base = tmp_path / "base"
    tiny_llama(seed=0).save_pretrained(base)
    tiny_tokenizer().save_pretrained(base)
    trainer = open_trainer(base, ["math"], RLAlgoConfig(precision="fp32", lora={"rank": rank, "alpha": alpha}))
    _randomize_b(trainer.model)
    return base, trainer, save_trainer(trainer, tmp_path / "checkpoints")


def test_continued_policy_is_the_checkpoint_on_its_base_and_the_reference_is_that_base(tmp_path):
    base, trained, checkpoint = _lora_checkpoint(tmp_path)
    assert lora_adapter_base(checkpoint, 2, 32.0) == str(base.resolve())
    algo = RLAlgoConfig(precision="fp32", lora={"rank": 2, "start": "continue"})
    trainer = open_trainer(checkpoint, ["math"], algo, base_dir=base)

    mine, saved = adapter_state(trainer.model), adapter_state(trained.model)
    assert mine.keys() == saved.keys() and all(torch.equal(mine[name], saved[name]) for name in mine)
    with torch.no_grad():
        assert torch.equal(trainer.model(IDS).logits, trained.model(IDS).logits)
        with adapters_disabled(trainer.model) as reference:
            assert torch.equal(reference(IDS).logits, load_policy(base, algo)(IDS).logits)
    # the engine's first weights are the checkpoint's (merged); what its adapters sit on is the base
    assert trainer.weights_dir == checkpoint and trainer.base_dir == base
    again = save_trainer(trainer, tmp_path / "continued")
    assert json.loads((again / "adapter" / "adapter_config.json").read_text())["base_model_name_or_path"] == str(base)


def test_continuing_a_mismatched_or_missing_adapter_is_refused_in_one_line(tmp_path):
    base, _, checkpoint = _lora_checkpoint(tmp_path, rank=2)
    with pytest.raises(ValueError, match="the checkpoint's adapter has rank 2 and alpha 32.0, algo.lora says rank 4"):
        lora_adapter_base(checkpoint, 4, 32.0)
    with pytest.raises(FileNotFoundError, match=f"{base} has none: set algo.lora.start: fresh"):
        lora_adapter_base(base, 2, 32.0)
    with pytest.raises(ValueError, match="lora.start=continue with kl_coef=0.1: the reference"):
        RLAlgoConfig(kl_coef=0.1, lora={"start": "continue"})


def test_pipeline_hands_rl_the_sft_adapter_only_when_sft_trains_one_alike():
    from passband.flows.pipeline.flow import PipelineConfig

    rl = {"algo": {"lora": {"rank": 4, "start": "continue"}}}
    with pytest.raises(ValueError, match=r"SFT's last stage \(\w+\) needs lora with RL's rank, alpha and target_modules"):
        PipelineConfig(rl=rl)
    stage = PipelineConfig().sft.stages[-1].model_dump()
    with pytest.raises(ValueError, match=r"it has \(8, 32.0, 'all-linear'\)"):
        PipelineConfig(rl=rl, sft={"stages": [{**stage, "lora": {"rank": 8}}]})
    config = PipelineConfig(rl=rl, sft={"stages": [{**stage, "lora": {"rank": 4}}]})
    assert config.rl.algo.lora.start == "continue"


@pytest.fixture(scope="module")
def harness():
    with prefect_test_harness(server_startup_timeout=300):
        yield


@pytest.mark.slow  # two rl flow runs under a Prefect test server: ~60 s on the shared 2-core box
def test_rl_run_continues_the_adapter_of_an_rl_lora_checkpoint(harness, tmp_path, monkeypatch):
    """Two runs of the rl flow on the digit model: LoRA from scratch, then LoRA continuing its checkpoint. The
    continued run's engine samples from the policy it trains (vllm_kl ~ 0, though the checkpoint moved away
    from the base), and its checkpoint's adapter names the digit model as its base, not the first run's."""
    digit_task(tmp_path, monkeypatch, "test-rl-lora-continue")
    from passband.flows.rl.flow import rl

    def with_lora(config, lora, **fields):
        data = config.model_dump()
        return type(config).model_validate({**data, **fields, "algo": {**data["algo"], "lr": 1e-1, "lora": lora}})

    first = rl(with_lora(_tiny_config(tmp_path), {"rank": 4}))
    start = first.outputs["checkpoint"]
    continued = rl(with_lora(_tiny_config(tmp_path), {"rank": 4, "start": "continue"}, model=start, num_iterations=1))

    client = MlflowClient()
    kl = [m.value for m in client.get_metric_history(continued.mlflow_run_id, "vllm_kl")]
    assert kl and abs(kl[0]) < 1e-6
    # ... which means something only if the checkpoint is not the base: an engine or policy left on the base
    # (fresh adapters, or the base served without the adapter) would sample or score another model
    moved = load_file(fetch_artifact(start) / "model.safetensors")
    digits = load_file(tmp_path / "digits" / "model.safetensors")
    assert max((moved[name] - digits[name]).abs().max().item() for name in digits) > 1e-3
    adapter = json.loads((fetch_artifact(continued.outputs["checkpoint"]) / "adapter" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == str((tmp_path / "digits").resolve())
