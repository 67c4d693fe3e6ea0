"""SFT with LoRA (StageConfig.lora): only the adapters train, the checkpoint holds the merged weights and the
adapter, and a stage killed mid-way resumes from the adapter to the uninterrupted stage's weights."""

import pytest
import torch
from safetensors.torch import load_file
from tiny_chat_model import tiny_llama, tiny_tokenizer

from passband.training.checkpoint import ADAPTER_FOLDER, read_weights
from passband.training.lora.settings import LoraConfig
from passband.training.sft.loop import train_stage
from test_sft_resume import Killed, _examples, _stage

IDS = torch.tensor([[5, 17, 33, 2, 9, 41, 7]])


def _lora_stage():
    # fp32, not `auto`: on a CPU with native bf16 (AVX512-BF16, AMX) auto is bf16 autocast, under which the
    # frozen base is stored in bf16 (tests/test_lora.py's base_weights_in_bf16), and the base could not
    # equal its fp32 self bit for bit below
    return _stage(activation_checkpointing=True).model_copy(
        update={"lora": LoraConfig(rank=4), "lr": 3e-2, "precision": "fp32"})


def test_sft_lora_trains_adapters_and_checkpoints_merged_weights(tmp_path):
    tokenizer, examples = tiny_tokenizer(), _examples(tiny_tokenizer())
    base = tiny_llama(seed=0).eval()
    model = tiny_llama(seed=0)
    result = train_stage(model, tokenizer, examples, _lora_stage(), tmp_path / "out")
    assert result.num_steps == 6
    # the frozen base did not move; the adapters did
    for name, parameter in model.named_parameters():
        if "lora_" not in name:
            assert torch.equal(parameter, base.state_dict()[name.replace(".base_layer", "")]), name
    assert any(p.abs().sum() > 0 for n, p in model.named_parameters() if "lora_B" in n)
    # the checkpoint's model is the merged weights: a plain model loaded from it computes the adapted logits
    merged = tiny_llama(seed=7).eval()
    merged.load_state_dict(read_weights(result.last_checkpoint), strict=False)  # lm_head is tied (saved once)
    with torch.no_grad():
        torch.testing.assert_close(merged(IDS).logits, model.eval()(IDS).logits, rtol=0, atol=1e-5)
        assert not torch.allclose(merged(IDS).logits, base(IDS).logits)
    adapter = load_file(result.last_checkpoint / ADAPTER_FOLDER / "adapter_model.safetensors")
    assert len(adapter) == 2 * 7 * 2 and all(name.startswith("base_model.model.") for name in adapter)


def test_sft_lora_killed_resumes_to_the_same_adapters(tmp_path):
    tokenizer, examples = tiny_tokenizer(), _examples(tiny_tokenizer())
    cfg = _lora_stage()
    full = train_stage(tiny_llama(seed=0), tokenizer, examples, cfg, tmp_path / "full")

    def kill_after_3(metrics, step):
        if step == 3:
            raise Killed
    with pytest.raises(Killed):
        train_stage(tiny_llama(seed=0), tokenizer, examples, cfg, tmp_path / "killed", on_metrics=kill_after_3)
    # the stage's start model again (a resumed stage loads it, as SFT's flow does); adapters from the checkpoint
    resumed = train_stage(tiny_llama(seed=0), tokenizer, examples, cfg, tmp_path / "killed",
                          resume_from=tmp_path / "killed" / "step_000002")
    assert resumed.num_steps == 6
    ours, theirs = (load_file(r.last_checkpoint / ADAPTER_FOLDER / "adapter_model.safetensors") for r in (full, resumed))
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[name], theirs[name]) for name in ours)
