"""An in-process vLLM engine leaves its host's state alone: the global RNGs (python, numpy, torch),
torch.set_num_threads, the garbage collector and vLLM's multiprocessing setting, which a later
engine of the process reads. Slow: starts vLLM on the real model."""

import gc
import os
import random

import numpy as np
import pytest
import torch

from passband.training.engines.config import EngineConfig, SamplingConfig


@pytest.mark.slow
def test_in_process_engine_keeps_the_host_rng_threads_and_environment(smollm2_dir):
    import vllm.envs

    from passband.training.engines.vllm_engine import VLLMEngine

    random.seed(7)
    np.random.seed(7)
    torch.manual_seed(7)
    set_num_threads = torch.set_num_threads
    before = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state())
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in os.environ
    engine = VLLMEngine(smollm2_dir, EngineConfig(in_process=True, kv_cache_gib=0.1, max_model_len=256,
                                                  max_num_seqs=8, trim_heap=True))
    samples = engine.generate(["What is 2 + 3?"], SamplingConfig(n=2, max_tokens=8, seed=1))
    assert len(samples[0]) == 2 and all(s.token_ids for s in samples[0])
    after = (random.getstate(), np.random.get_state()[1], torch.get_rng_state())
    assert after[0] == before[0] and np.array_equal(after[1], before[1]) and torch.equal(after[2], before[2])
    assert torch.set_num_threads is set_num_threads
    assert gc.get_freeze_count() == 0
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in os.environ
    assert vllm.envs.VLLM_ENABLE_V1_MULTIPROCESSING  # a later engine of this process gets its own processes
    engine.close()
