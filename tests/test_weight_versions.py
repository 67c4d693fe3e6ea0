"""Weights published in the engine's dtype, by version (training/weights/): the cast and the fp32
head on a tiny model with hand-picked values, the shard layout, manifest-last reads, garbage
collection, and on the real model the same engine weights whether the cast happens before the
engine (now) or inside it (the fp32 files of before)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from passband.training.weights.engine_dtype import engine_tensors, head_name, write_shards
from passband.training.weights.versions import (MANIFEST, collect_garbage, committed_versions, newest_version,
                                                publish_state_dict, publish_version, version_dir)


def tiny_llama(tied: bool) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=tied)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        # bf16 keeps 8 significant bits: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 and rounds to
        # the even one, 1.0; 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6 and rounds to
        # 1 + 2^-6 = 1.015625
        model.model.norm.weight[:2] = torch.tensor([1 + 2**-8, 1 + 3 * 2**-8])
        model.get_output_embeddings().weight[0, 0] = 1 + 2**-8
    return model


def saved_names(model: torch.nn.Module, tmp_path: Path) -> list[str]:
    """The tensor names save_pretrained writes (the independent reference for the names)."""
    model.save_pretrained(tmp_path / "reference")
    with safe_open(str(tmp_path / "reference" / "model.safetensors"), "pt") as f:
        return sorted(f.keys())


@pytest.mark.parametrize("tied", [True, False])
def test_body_in_bf16_head_in_fp32_under_the_names_save_pretrained_writes(tied: bool, tmp_path: Path) -> None:
    model = tiny_llama(tied)
    head = "model.embed_tokens.weight" if tied else "lm_head.weight"
    assert head_name(model) == head
    tensors = dict(engine_tensors(model.state_dict(), head_name(model), torch.bfloat16, lm_head_fp32=True))
    assert sorted(tensors) == saved_names(model, tmp_path)
    assert ("lm_head.weight" in tensors) == (not tied)  # a tied head is written once, as the embedding
    assert {name for name, t in tensors.items() if t.dtype == torch.float32} == {head}
    assert tensors["model.norm.weight"][:2].tolist() == [1.0, 1.015625]
    assert tensors[head][0, 0].item() == 1 + 2**-8  # fp32: not rounded
    # without the fp32 head every tensor is bf16, the head's value rounded like the rest
    plain = dict(engine_tensors(model.state_dict(), head_name(model), torch.bfloat16, lm_head_fp32=False))
    assert {t.dtype for t in plain.values()} == {torch.bfloat16}
    assert plain[head][0, 0].item() == 1.0
    # the cast is vLLM's loader's (param.copy_(loaded)), bit for bit, for every tensor
    state = model.state_dict()
    for name, tensor in plain.items():
        assert torch.equal(torch.empty_like(state[name], dtype=torch.bfloat16).copy_(state[name]), tensor)


def test_an_fp32_engine_gets_the_parameters_themselves_no_copy() -> None:
    model = tiny_llama(tied=True)
    state = model.state_dict()
    for name, tensor in engine_tensors(model.state_dict(), head_name(model), torch.float32, lm_head_fp32=False):
        assert tensor.data_ptr() == state[name].data_ptr()


def test_shards_fill_up_to_their_size_in_order(tmp_path: Path) -> None:
    a, b, c = torch.arange(10, dtype=torch.float32), torch.ones(20, dtype=torch.bfloat16), torch.zeros(5)
    # 40 + 40 bytes fill the first 80-byte shard; c's 20 would overflow it and opens the second
    sizes = write_shards(iter([("a", a), ("b", b), ("c", c)]), tmp_path, shard_bytes=80)
    assert list(sizes) == ["model-00001.safetensors", "model-00002.safetensors"]
    first, second = load_file(str(tmp_path / "model-00001.safetensors")), load_file(str(tmp_path / "model-00002.safetensors"))
    assert sorted(first) == ["a", "b"] and list(second) == ["c"]
    assert torch.equal(first["a"], a) and torch.equal(first["b"], b) and torch.equal(second["c"], c)
    assert sizes["model-00002.safetensors"] == (tmp_path / "model-00002.safetensors").stat().st_size


def test_a_published_version_reloads_bit_for_bit_with_its_manifest(tmp_path: Path) -> None:
    model = tiny_llama(tied=True)
    path = publish_version(model, tmp_path, 7, "bfloat16", lm_head_fp32=True)
    assert path == tmp_path / "v7" and version_dir(tmp_path, 7) == path
    manifest = json.loads((path / MANIFEST).read_text())
    assert (manifest["version"], manifest["dtype"], manifest["lm_head_fp32"]) == (7, "bfloat16", True)
    loaded = {}
    for name in manifest["files"]:
        loaded |= load_file(str(path / name))
    expected = dict(engine_tensors(model.state_dict(), head_name(model), torch.bfloat16, lm_head_fp32=True))
    assert sorted(loaded) == sorted(expected)
    for name, tensor in expected.items():
        assert loaded[name].dtype == tensor.dtype and torch.equal(loaded[name], tensor)


def test_a_state_dict_is_published_by_the_same_writer(tmp_path: Path) -> None:
    """What rank 0 of the torchrun trainer hands the writer: a plain {name: tensor} dict, no module."""
    # the values of tiny_llama's: 1 + 2^-8 rounds to 1.0 in bf16, 1 + 3 * 2^-8 to 1.015625
    head = torch.tensor([[1 + 2**-8, 1 + 3 * 2**-8], [0.5, -2.0]])
    state = {"embed.weight": head, "norm.weight": torch.tensor([1 + 2**-8, 1 + 3 * 2**-8]),
             "head.weight": head}  # a second name for the same tensor (a tied head) is written once
    path = publish_state_dict(state, "embed.weight", tmp_path, 3, "bfloat16", lm_head_fp32=True, keep=1)
    manifest = json.loads((path / MANIFEST).read_text())
    assert path == tmp_path / "v3" and version_dir(tmp_path, 3) == path
    assert (manifest["version"], manifest["dtype"], manifest["lm_head_fp32"]) == (3, "bfloat16", True)
    assert list(manifest["files"]) == ["model-00001.safetensors"]
    loaded = load_file(str(path / "model-00001.safetensors"))
    assert sorted(loaded) == ["embed.weight", "norm.weight"]
    assert loaded["embed.weight"].dtype == torch.float32 and torch.equal(loaded["embed.weight"], head)
    assert loaded["norm.weight"].dtype == torch.bfloat16 and loaded["norm.weight"].tolist() == [1.0, 1.015625]
    # the next version without the fp32 head: every tensor bf16; keep=1 deletes v3
    path = publish_state_dict(state, "embed.weight", tmp_path, 4, "bfloat16", lm_head_fp32=False, keep=1)
    assert committed_versions(tmp_path) == [4] and not (tmp_path / "v3").exists()
    assert json.loads((path / MANIFEST).read_text())["lm_head_fp32"] is False
    loaded = load_file(str(path / "model-00001.safetensors"))
    assert {t.dtype for t in loaded.values()} == {torch.bfloat16}
    assert loaded["embed.weight"].tolist() == [[1.0, 1.015625], [0.5, -2.0]]


def test_a_version_without_its_manifest_or_with_a_short_shard_is_never_read(tmp_path: Path) -> None:
    model = tiny_llama(tied=True)
    publish_version(model, tmp_path, 1, "bfloat16", False)
    publish_version(model, tmp_path, 2, "bfloat16", False)
    # v3: a publisher killed after its shards, before the manifest
    write_shards(engine_tensors(model.state_dict(), head_name(model), torch.bfloat16, False), tmp_path / "v3")
    assert committed_versions(tmp_path) == [1, 2] and newest_version(tmp_path) == 2
    with pytest.raises(FileNotFoundError, match="v3 .* is not published"):
        version_dir(tmp_path, 3)
    shard = next((tmp_path / "v2").glob("*.safetensors"))
    shard.write_bytes(shard.read_bytes()[:-1])
    with pytest.raises(FileNotFoundError, match=f"{shard.name} has {shard.stat().st_size} bytes"):
        version_dir(tmp_path, 2)
    assert newest_version(tmp_path / "nothing-yet") is None


def test_old_versions_are_collected_and_a_redone_iteration_drops_the_newer_ones(tmp_path: Path) -> None:
    model = tiny_llama(tied=False)
    write_shards(engine_tensors(model.state_dict(), head_name(model), torch.bfloat16, False), tmp_path / "v0")  # an unfinished one
    for version in (1, 2, 3, 4):
        publish_version(model, tmp_path, version, "bfloat16", False, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v3", "v4"]
    assert collect_garbage(tmp_path, keep=1) == [3]
    # a resumed run redoing iteration 2: v4 came from the iterations it rolled back
    publish_version(model, tmp_path, 2, "bfloat16", False, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v2"] and newest_version(tmp_path) == 2
    with pytest.raises(ValueError, match="keep=0"):
        publish_version(model, tmp_path, 5, "bfloat16", False, keep=0)


def perturbed(model_dir: Path) -> torch.nn.Module:
    """The real model moved off its shipped weights (so a reload has something to change)."""
    from passband.training.model_source import load_causal_lm

    model = load_causal_lm(model_dir)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(1e-3 * torch.randn(parameter.shape, generator=generator))
    return model


@pytest.mark.parametrize("lm_head_fp32", [False, True])
def test_hf_engine_weights_are_the_same_bits_either_way(smollm2_dir: Path, tmp_path: Path, lm_head_fp32: bool) -> None:
    from passband.training.engines import EngineConfig
    from passband.training.engines.hf_engine import HFEngine

    model = perturbed(smollm2_dir)
    model.save_pretrained(tmp_path / "fp32")
    publish_version(model, tmp_path / "versions", 1, "bfloat16", lm_head_fp32)
    engine = HFEngine(smollm2_dir, EngineConfig(kind="hf", dtype="bfloat16", lm_head_fp32=lm_head_fp32))
    engine.load_weights(tmp_path / "fp32")
    cast_inside = {name: t.clone() for name, t in engine.model.state_dict().items()}
    engine.load_weights(version_dir(tmp_path / "versions", 1))
    cast_before = engine.model.state_dict()
    assert sorted(cast_before) == sorted(cast_inside)
    for name, tensor in cast_inside.items():
        assert cast_before[name].dtype == tensor.dtype and torch.equal(cast_before[name], tensor), name
    head = engine.model.get_output_embeddings().weight
    assert head.dtype == (torch.float32 if lm_head_fp32 else torch.bfloat16)


# slow: a real vLLM engine in this process, minutes on 2 cores. It also needs a process that has
# not imported flask: vLLM's kernel registration (vllm/triton_utils/dispatcher.py) calls hasattr on
# every module attribute, and werkzeug's context proxies (moto's server tests import them) raise there.
@pytest.mark.slow
def test_vllm_engine_samples_the_same_bits_either_way(smollm2_dir: Path, tmp_path: Path) -> None:
    """A vLLM engine with an fp32 head samples the same tokens with the same log-probs after a sync
    from the fp32 files (the cast inside the engine), from the published version (the body cast
    before the engine, the head read in fp32) and from the same tensors handed over in memory
    (engine.weight_transfer: memory, no file). (~2 min on 2 cores.)"""
    from passband.tasks.steps.rl import push_weights
    from passband.training.chat import render_prompt
    from passband.training.engines import EngineConfig, SamplingConfig
    from passband.training.engines.vllm_engine import VLLMEngine
    from passband.training.model_source import load_tokenizer

    tokenizer = load_tokenizer(smollm2_dir)
    prompts = [render_prompt(tokenizer, q) for q in ("What is 3 + 4?", "Name a color.")]
    sampling = SamplingConfig(n=2, max_tokens=24, seed=3)
    config = EngineConfig(lm_head_fp32=True, in_process=True, kv_cache_gib=0.25, max_model_len=512)
    model = perturbed(smollm2_dir)
    engine = VLLMEngine(smollm2_dir, config)
    try:
        def sampled() -> list[tuple[list[int], list[float]]]:
            return [(s.token_ids, s.logprobs) for group in engine.generate(prompts, sampling) for s in group]

        def engine_head() -> torch.Tensor:
            """The engine's fp32 LM head, without the rows vLLM pads the vocabulary with."""
            vocab = model.config.vocab_size
            return engine.llm.collective_rpc(lambda worker: worker.model_runner.get_model().lm_head.weight[:vocab].clone())[0]

        trainer_head = model.get_output_embeddings().weight.detach()
        shipped = sampled()
        # weight_transfer memory: the same tensors handed over without a file (then back to the shipped
        # weights, so each path below has something to change)
        assert push_weights(model, engine, config.model_copy(update={"weight_transfer": "memory"}), tmp_path, 1) is None
        in_memory, head_in_memory = sampled(), engine_head()
        engine.release_weights()
        engine.load_weights(smollm2_dir)
        assert sampled() == shipped
        model.save_pretrained(tmp_path / "fp32")
        engine.release_weights()
        engine.load_weights(tmp_path / "fp32")
        cast_inside, head_inside = sampled(), engine_head()
        engine.release_weights()
        push_weights(model, engine, config, tmp_path, 1)
        cast_before, head_before = sampled(), engine_head()
    finally:
        engine.close()
    assert cast_inside != shipped  # the sync changed the weights the engine samples from
    assert cast_before == cast_inside == in_memory
    # the head is the trainer's fp32 one, bit for bit, any way
    assert head_inside.dtype == head_before.dtype == head_in_memory.dtype == torch.float32
    assert all(torch.equal(head, trainer_head) for head in (head_inside, head_before, head_in_memory))
