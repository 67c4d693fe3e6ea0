"""Judges' I/O: their engines opened on resolved checkpoints for a flow's lifetime, and their texts
logged beside the rollouts they scored (training/judge/ is the computation)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from passband.training.judge.config import JudgeConfig
from passband.training.judge.judge import Judge


@contextmanager
def opened_judges(configs: dict[str, JudgeConfig]) -> Iterator[dict[str, Judge]]:
    """task -> Judge on its own engine, open while the block runs; nothing is opened without a judge.

    Each judge gets an engine of its own (not the keeper's: the keeper holds one engine at a time,
    and the policy's must stay live beside the judge's)."""
    from passband.tasks.artifacts.model import resolve_model
    from passband.training.engines import open_engine
    from passband.training.model_source import load_tokenizer

    with ExitStack() as stack:
        judges = {}
        for task_name, config in configs.items():
            model_dir = resolve_model(config.model)
            engine = open_engine(config.engine, model_dir)
            stack.callback(engine.close)
            judges[task_name] = Judge(config, engine, load_tokenizer(Path(model_dir), config.engine.trust_remote_code))
        yield judges


def log_judge_samples(records: list[dict[str, Any]], name: str, run_id: str) -> None:
    """The judge's rows (one per judged rollout: the rollout, the verdict, the judge's texts and
    scores) as the MLflow artifact `judge/<name>.jsonl`."""
    from passband.tasks.reporting import tracking

    with tempfile.TemporaryDirectory(prefix="passband-judge-") as tmp:
        path = Path(tmp) / f"{name}.jsonl"
        path.write_text("".join(json.dumps(record) + "\n" for record in records))
        tracking.log_artifact_file(path, "judge", run_id)
