"""The hf engine samples on its device (issue 67 item 7): its model placed there and every prompt
batch moved there, checked with the trainers' tagged device (tests/device_tag.py), so a tensor left on
the host would be recorded as CUDA would refuse it, and the samples equal the plain CPU engine's."""

from __future__ import annotations

import pytest
import torch

from device_tag import TAG, DeviceTagMode, OnDevice
from tiny_chat_model import tiny_llama, tiny_tokenizer
from passband.training.engines.config import EngineConfig, SamplingConfig
from passband.training.engines.hf_engine import HFEngine


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-chat")
    tiny_llama(seed=3).save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return path


class _Generated(Exception):
    """Raised by the recording generate: what reached it is all the test needs."""


def test_the_model_and_the_prompts_live_on_the_engine_device(tiny_dir):
    """transformers' generate builds tensors "on" the model's device from Python data (its special tokens),
    which the tagged device cannot give values to; so generate itself is replaced by a recorder of what it is
    handed, after the engine placed its model and encoded its prompts."""
    config = EngineConfig(kind="hf", dtype="float32")
    handed: dict[str, torch.device] = {}

    def recording_generate(**kwargs):
        handed.update({name: value.device for name, value in kwargs.items() if isinstance(value, torch.Tensor)})
        raise _Generated

    with DeviceTagMode() as mode:
        engine = HFEngine(tiny_dir, config, device=TAG)
        assert engine.device == TAG
        assert all(isinstance(p, OnDevice) for p in engine.model.parameters())  # weights on the device
        engine.model.generate = recording_generate
        # loading ran under the mode too (transformers' own buffer init copies host tensors); from here on
        # every tensor the engine makes must be on its device
        loading = len(mode.mixed)
        for prompts in (["a b", "c"], [[5, 6, 7, 8], [9, 10]]):  # text and token-id prompts
            handed.clear()
            with pytest.raises(_Generated):
                engine.generate(prompts, SamplingConfig(n=2, max_tokens=5, seed=4))
            assert handed == {"input_ids": TAG, "attention_mask": TAG}
    assert mode.mixed[loading:] == []


def test_on_a_machine_without_a_gpu_the_engine_samples_on_the_cpu(tiny_dir):
    engine = HFEngine(tiny_dir, EngineConfig(kind="hf", dtype="float32"))
    assert engine.device == torch.device("cpu") and next(engine.model.parameters()).device == torch.device("cpu")
    assert len(engine.generate([[5, 6, 7]], SamplingConfig(n=2, max_tokens=3, seed=1, ignore_eos=True))[0]) == 2
