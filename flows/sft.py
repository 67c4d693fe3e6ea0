"""The `sft` flow: curriculum SFT in stages, each from the previous stage's final checkpoint.

Per stage: load its datasets (curated artifacts, local chat files, or built-in worked math or
proof-grading analyses),
mix by weight and band, drop eval prompts, chat-encode with the rollout template, train with
packing and the chunked loss (training.sft.loop), committing checkpoints manifest-last. A rerun
skips completed stages and continues a broken one from its last checkpoint (tasks/steps/sft.py). With
`eval` set, the held-out sets are scored before the first and after the last stage.
"""

from __future__ import annotations

import itertools
import re
import time
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator
from prefect import flow

from passband.flows.common_config import EngineConfig, ProblemSource, SamplingConfig
from passband.curation.suites.math_suite import AnswerFormat
from passband.flows.config import Config
from passband.tasks.artifacts.manifest import ARTIFACT_SCHEMES
from passband.tasks.stages.summary import RunSummary
from passband.flows.evaluate.config import EvalConfig
from passband.training.episodes.math_python import MathToolConfig
from passband.training.runtime.config import DistributedConfig
from passband.training.sft.config import StageConfig

_STAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# Settings that change how a run proceeds, not what it produces: left out of the cache key
# (`distributed`: N ranks give the one-process weights up to float summation order).
RUN_CONTROL_FIELDS = {"force", "resume", "distributed"}


class WorkedMathSource(Config):
    """Built-in SFT data: procedural math problems with template-written worked solutions ending in
    "The answer is \\boxed{N}." (or, in the plain format, "The answer is N."), each checked by the math
    verifier (curation/worked_math.py). Never a held-out question, in either format."""

    num_examples: int = Field(200, ge=1)
    """Distinct problems to write solutions for (cycling over difficulty x sub-domain)."""
    difficulties: list[int] = [0]
    """Math suite difficulties to draw from (0 = one-digit arithmetic, the demo model's band)."""
    subdomains: list[str] | None = None
    """Math sub-domains (default: all five)."""
    seed: int = 0
    """Seed of the problem generators (their own namespace: not the suite's problems)."""
    answer_format: AnswerFormat = "boxed"
    """What the prompts ask for and the completions give: `boxed` (reasoning, then \\boxed{N}) or
    `plain` ("Answer with just the number.", answered "... The answer is N.")."""
    show_work: bool = True
    """Write the one-line reasoning before the answer. Off, a plain answer is the bare number: the
    format a small model then copies to counting questions, where it needs the reasoning."""
    balanced: bool = True
    """Every (difficulty, sub-domain) pair gives an equal share, an error when one runs out of problems
    outside the held-out questions; off, a pair that runs out leaves the cycle and the others fill the
    rest (a large eval split at difficulty 0 leaves few number-theory questions)."""


class WorkedAnalysisSource(Config):
    """Built-in SFT data for a proof-grading verifier: generated triples (problem, worked solution with
    one injected defect, score) with the analysis a perfect verifier writes as the completion (the
    defect's step named, then the score it earns), each checked by the grading verifier with the
    defect check on (curation/grading/analyses.py). Never a held-out problem."""

    num_examples: int = Field(200, ge=1)
    """Triples to write analyses for (the defect kinds in turn: a third each of scores 1, 0.5 and 0)."""
    difficulty: int = Field(0, ge=0, le=2)
    """Math suite difficulty of the problems (0-2: chains a small verifier can follow)."""
    subdomains: list[str] | None = None
    """Math sub-domains of the problems (default: all five)."""
    seed: int = 0
    """Seed of the triples; the held-out problems are skipped whatever it is."""
    balanced: bool = True
    """Every sub-domain gives an equal share, an error when one runs out of problems outside the
    held-out ones; off, a sub-domain that runs out leaves the cycle (difficulty 0 holds 361 distinct
    problems with a worked chain, only 31 of them combinatorics)."""


class ToolTraceSource(Config):
    """Built-in SFT data for math with the Python tool: procedural math problems, each a teacher-written
    episode (a `python` call whose program computes the answer, the sandbox's real output, then the
    answer) run through the math-with-Python environment and kept only when the program printed the
    answer and the answer passed the math verifier (curation/tool_math.py, training/episodes/teacher.py).
    Rows are token-exact under the SFT model's tokenizer, with loss on the teacher's turns only. Never a
    held-out question."""

    num_examples: int = Field(200, ge=1)
    """Distinct problems to write episodes for (cycling over difficulty x sub-domain)."""
    difficulties: list[int] = [0]
    """Math suite difficulties to draw from."""
    subdomains: list[str] | None = None
    """Math sub-domains (default: all five)."""
    seed: int = 0
    """Seed of the problem generators (their own namespace, "tool": neither the suite's nor worked math's)."""
    answer_format: AnswerFormat = "plain"
    """What the prompts ask for and the last turn gives: `plain` (the number) or `boxed`."""
    balanced: bool = True
    """As WorkedMathSource.balanced."""
    math_tool: MathToolConfig = MathToolConfig()
    """The environment the episodes run in: take RL's and evaluate's `math_tool`, so the system message,
    the tool's limits and the budget are the ones the model meets there."""


class SFTConfig(Config):
    """Curriculum SFT: stages in order, each starting from the previous stage's final checkpoint."""

    model: str = "smollm2-135m-instruct"
    """Starting checkpoint: `smollm2-135m-instruct`, a checkpoint artifact URI, or a local dir."""
    stages: list[StageConfig] = [StageConfig(
        name="format", datasets={"worked_math": 1.0}, max_length=384, num_steps=10, lr=3e-5,
        warmup_steps=2, batch_tokens=2048, micro_batch_tokens=768, loss_chunk_size=256,
        activation_checkpointing=True)]
    """The curriculum. A stage's dataset names are keys of `generated` or `worked_analyses`, dataset artifact URIs
    (file://, s3://; e.g. curate's sft_stage1) or local .jsonl/.parquet chat-format files."""
    generated: dict[str, WorkedMathSource] = {"worked_math": WorkedMathSource()}
    """Built-in data sources by name; only those a stage names are generated."""
    worked_analyses: dict[str, WorkedAnalysisSource] = {}
    """Built-in proof-grading analyses by name (names apart from `generated`'s); only those a stage
    names are generated."""
    tool_traces: dict[str, ToolTraceSource] = Field({}, exclude_if=lambda sources: not sources)
    """Built-in teacher-written tool episodes for math with the Python tool, by name (names apart from
    the other built-in sources'); only those a stage names are generated. {}: none."""
    eval: EvalConfig | None = EvalConfig(
        suites={"math": ProblemSource(suite="math", num_problems=32, seed=1000, difficulty=0, answer_format="boxed")},
        verifiers={"math": {"answer_format": "boxed"}}, sampling=SamplingConfig(n=4, temperature=0.6, max_tokens=96))
    """Held-out evaluation before the first and after the last stage (None: skip); stage data whose
    prompt equals an eval prompt is dropped. SFT's default: 32 math problems asking for \\boxed{}
    (the format SFT teaches, docs/recipe.md section 10), 4 samples each at T=0.6."""
    engine: EngineConfig = EngineConfig()
    """The engine that samples the held-out evaluation."""
    held_out: dict[str, str | ProblemSource] = {}
    """More held-out sets (name -> dataset artifact URI or problem source) whose questions no
    training row may ask, in any answer format, besides `eval`'s. The pipeline adds its evaluate
    stage's sets here, so SFT never trains on the final table's problems."""
    distributed: DistributedConfig = DistributedConfig()
    """Ranks per stage: nproc_per_node > 1 runs each stage's loop under torchrun (FSDP2), launched by
    this flow, which keeps the MLflow logging and the checkpoint commits (tasks/steps/sft_torchrun.py)."""
    resume: bool = True
    """Skip stages whose final checkpoint exists and continue a stage from its newest checkpoint;
    false retrains every stage from its start (replacing its checkpoints)."""
    force: bool = False
    """Run even when this exact config already completed (otherwise its summary is reused)."""

    @model_validator(mode="after")
    def _check_stages(self) -> "SFTConfig":
        names = [stage.name for stage in self.stages]
        if not names:
            raise ValueError("stages is empty")
        sources = {"generated": self.generated, "worked_analyses": self.worked_analyses, "tool_traces": self.tool_traces}
        for (first, names_a), (second, names_b) in itertools.combinations(sources.items(), 2):
            both = sorted(set(names_a) & set(names_b))
            if both:
                raise ValueError(f"{first} and {second} both name {both}: a dataset name means one source")
        bad = [name for name in names if not _STAGE_NAME.fullmatch(name)]
        if bad or len(set(names)) != len(names):
            raise ValueError(f"stage names must be unique and use letters, digits and ._- (got {names})")
        problems = [f"stages.{index}.datasets: {problem}" for index, stage in enumerate(self.stages)
                    for name in stage.datasets if (problem := self._dataset_problem(name))]
        if problems:
            raise ValueError("; ".join(problems))
        adapted = [stage.name for stage in self.stages if stage.lora is not None]
        if adapted and self.distributed.launches_ranks:
            raise ValueError(f"stages {adapted} set lora, which trains in the flow's own process, not on torchrun "
                             "ranks (distributed.nproc_per_node > 1 or torchrun_at_one_rank): set "
                             "distributed.nproc_per_node: 1 (a 7-8B base and its adapters fit one 80 GB GPU)")
        return self

    def _dataset_problem(self, name: str) -> str | None:
        """Why a stage's dataset name would not load when the stage starts, or None (a pipeline
        reference is the pipeline's to check: flows/pipeline/refs.py)."""
        if name in self.built_in or name.startswith(("@", *ARTIFACT_SCHEMES)):
            return None
        if Path(name).suffix in (".jsonl", ".parquet"):
            return None if Path(name).is_file() else f"{name}: no such file (relative to {Path.cwd()})"
        return (f"{name!r} is none of: a key of generated ({', '.join(self.generated) or 'none'}), of "
                f"worked_analyses ({', '.join(self.worked_analyses) or 'none'}) or of tool_traces "
                f"({', '.join(self.tool_traces) or 'none'}), a dataset URI (file://, s3://), a .jsonl/.parquet chat file")

    @property
    def built_in(self) -> set[str]:
        """The names of the built-in sources (generated, worked_analyses, tool_traces)."""
        return set(self.generated) | set(self.worked_analyses) | set(self.tool_traces)


def _dataset_refs(config: SFTConfig, eval_prompts: list[str], model_dir: str, run_id: str) -> dict[str, str]:
    """Each dataset name the stages use -> the URI or path its rows are read from (tool traces are
    tokenized with `model_dir`'s tokenizer, the checkpoint the first stage trains)."""
    from passband.tasks.reporting import tracking
    from passband.tasks.artifacts.datasets import read_table
    from passband.tasks.steps.sft_data import commit_tool_traces, commit_worked_analyses, commit_worked_math

    refs: dict[str, str] = {}
    for name in dict.fromkeys(name for stage in config.stages for name in stage.datasets):
        if name in config.generated:
            refs[name] = commit_worked_math(config.generated[name].model_dump(), eval_prompts)
        elif name in config.worked_analyses:
            refs[name] = commit_worked_analyses(config.worked_analyses[name].model_dump(), eval_prompts)
        elif name in config.tool_traces:
            refs[name] = commit_tool_traces(config.tool_traces[name].model_dump(mode="json"), eval_prompts,
                                            config.model, model_dir, config.engine.trust_remote_code)
        else:
            refs[name] = name
        if refs[name].startswith(ARTIFACT_SCHEMES):
            tracking.log_dataset(refs[name], name, "training", read_table(refs[name]), run_id)
    return refs


def _held_out_prompts(config: SFTConfig, eval_sets: dict[str, list[dict]], run_id: str) -> list[str]:
    """The prompts no training row may ask: the eval sets' and those of `held_out` (URIs and sources)."""
    from passband.tasks.steps.evaluation import eval_sets_from

    prompts = [row["prompt"] for rows in eval_sets.values() for row in rows]
    if config.held_out:
        held_out_sets = eval_sets_from(
            {name: ref for name, ref in config.held_out.items() if isinstance(ref, str)},
            {name: ref for name, ref in config.held_out.items() if isinstance(ref, ProblemSource)},
            run_id=run_id)
        prompts += [row["prompt"] for rows in held_out_sets.values() for row in rows]
    return prompts


def _train_stage(config: SFTConfig, stage: StageConfig, refs: dict[str, str], tokenizer: Any, eval_prompts: list[str],
                 start_from: str, start_dir: str, step_offset: int, run_id: str) -> Any:
    """One stage from `start_from` (in local dir `start_dir`): its examples without held-out prompts,
    its cache key, its training or resumption (tasks/steps/sft.py); returns the StageOutcome."""
    from passband.tasks.steps.sft import sft_stage_key, train_sft_stage
    from passband.tasks.steps.sft_data import stage_examples
    from passband.training.sft.loop import data_fingerprint

    stage_refs = {name: refs[name] for name in stage.datasets}
    examples = stage_examples(stage, stage_refs, tokenizer, eval_prompts, run_id)
    key = sft_stage_key(stage, stage_refs, start_from, data_fingerprint(examples))
    return train_sft_stage(stage, examples, start_dir, start_from, key, config.resume, step_offset, run_id,
                           config.distributed, config.engine.trust_remote_code)


def _evaluate(model_dir: str, eval_sets: dict, config: SFTConfig, label: str, step: int,
              run_id: str) -> dict[str, float]:
    """Score `model_dir` on the eval sets with an engine opened for it; log everything as the
    `eval/` series at `step` (as RL does), return the headline under `label/` for the summary
    (`before/math/pass@1`, `after/mean/pass@1`, ...)."""
    from passband.tasks.steps.evaluation import log_evaluation, run_evaluation
    from passband.tasks.steps.judge import opened_judges
    from passband.tasks.steps.rollout import open_engine

    engine = open_engine(config.engine, model_dir)
    with opened_judges(config.eval.judges) as judges:  # a judge model (if any) on an engine of its own
        evaluation = run_evaluation(engine, eval_sets, config.eval.sampling, config.eval.verifiers, model_dir,
                                    judges=judges, trust_remote_code=config.engine.trust_remote_code)
    engine.close()
    return {f"{label}/{name}": value for name, value in log_evaluation(evaluation, label, step, run_id).items()}


def _model_card(config: SFTConfig, metrics: dict[str, float]) -> str:
    stages = "\n".join(f"- {stage.name}: {stage.num_steps or 'epochs'} steps on {', '.join(stage.datasets)}, "
                        f"max_length {stage.max_length}, final loss {metrics.get(f'{stage.name}/final_loss', float('nan')):.4f}"
                        for stage in config.stages)
    held_out = "\n".join(f"- {k}: {v:.3f}" for k, v in sorted(metrics.items()) if k.startswith(("before/", "after/"))
                          and k.endswith("/pass@1"))
    return (f"# passband SFT checkpoint\n\nCurriculum SFT (docs/recipe.md section 3) of `{config.model}`.\n\n"
            f"## Stages\n{stages}\n\n## Held-out pass@1\n{held_out or '- not evaluated'}\n")


@flow(name="sft", flow_run_name="sft")
def sft(config: SFTConfig = SFTConfig(), parent_run_id: str | None = None) -> RunSummary:
    """Train the stages in order; outputs every stage's final checkpoint, the last as `checkpoint`."""
    from passband.tasks.reporting import tracking
    from passband.tasks.steps.evaluation import eval_sets_from
    from passband.tasks.artifacts.model import resolve_model
    from passband.tasks.reporting.registry import log_model
    from passband.tasks.stages.stage import StageRun, run_in_stage
    from passband.training.model_source import load_tokenizer
    from passband.training.sft.run_metrics import stage_metrics, throughput_metrics

    started = time.perf_counter()

    def work(run: StageRun) -> RunSummary:
        run_id = run.run_id

        model_dir = resolve_model(config.model)
        tokenizer = load_tokenizer(model_dir, config.engine.trust_remote_code)
        eval_sets: dict[str, list[dict]] = {}
        metrics: dict[str, float] = {}
        if config.eval is not None:
            eval_sets = eval_sets_from(config.eval.datasets, config.eval.suites, run_id=run_id)
            metrics |= _evaluate(model_dir, eval_sets, config, "before", 0, run_id)
        eval_prompts = _held_out_prompts(config, eval_sets, run_id)
        refs = _dataset_refs(config, eval_prompts, model_dir, run_id)
        # datasets this run built are outputs; those it was given by URI are its inputs
        outputs = {f"data_{name}": ref for name, ref in refs.items() if name in config.built_in}

        start_from, start_dir, step_offset = config.model, model_dir, 0
        trained: list[tuple[float, float]] = []  # (tokens_per_s, peak_memory_mb) of the stages that ran steps
        for index, stage in enumerate(config.stages, start=1):
            outcome = _train_stage(config, stage, refs, tokenizer, eval_prompts, start_from, start_dir, step_offset,
                                   run_id)
            step_offset += outcome.total_steps
            metrics |= stage_metrics(stage.name, outcome.total_steps, outcome.steps_run, outcome.final_loss,
                                     outcome.tokens_per_s)
            trained += [(outcome.tokens_per_s, outcome.peak_memory_mb)] if outcome.steps_run else []
            outputs[f"stage{index}_checkpoint"] = outcome.checkpoint_uri
            start_from, start_dir = outcome.checkpoint_uri, resolve_model(outcome.checkpoint_uri)
        outputs["checkpoint"] = start_from

        if config.eval is not None:
            metrics |= _evaluate(start_dir, eval_sets, config, "after", step_offset, run_id)
        log_model(start_from, run_id, _model_card(config, metrics), config.engine.trust_remote_code)
        metrics |= {**throughput_metrics(trained), "wall_s": time.perf_counter() - started}
        tracking.log_metrics({k: v for k, v in metrics.items() if not k.startswith(("before/", "after/"))},
                             step=step_offset, run_id=run_id)
        return run.finish(outputs, metrics)

    return run_in_stage("sft", config, work, parent_run_id, run_control=RUN_CONTROL_FIELDS, system_metrics=True)
