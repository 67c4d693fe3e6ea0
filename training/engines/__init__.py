"""Rollout engines behind one small protocol: vLLM (fast path) and transformers (reference)."""

from passband.training.engines.config import EngineConfig, SamplingConfig
from passband.training.engines.open import open_engine
from passband.training.engines.protocol import RolloutEngine, Sample

__all__ = ["EngineConfig", "RolloutEngine", "Sample", "SamplingConfig", "open_engine"]
