"""Config blocks the flows share, each defined beside the code that consumes it and re-exported
here for the flows: the engine and sampling configs (training/engines/config.py) and where
problems come from (curation/suites/source.py)."""

from __future__ import annotations

from passband.curation.suites.source import ProblemSource
from passband.training.engines.config import EngineConfig, SamplingConfig

__all__ = ["EngineConfig", "ProblemSource", "SamplingConfig"]
