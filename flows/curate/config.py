"""The curate flow's config: pools, eval splits, pass-rate sampling, SFT selection; it composes the
hygiene, balance and pre-filter configs that live beside their code in curation/.

Defaults follow docs/recipe.md section 2 (bands: each catalog task's default_band; the SFT rule
0 < npass < n); the presets size the pools for the demo model (docs/recipe.md section 10).
"""

from __future__ import annotations

from pydantic import Field, model_validator

from passband.curation.balance import BalanceConfig
from passband.curation.bands import Band, DifficultyBands, PrefilterConfig
from passband.curation.catalog import TASKS, VerifierSettings
from passband.curation.hygiene import HygieneConfig
from passband.flows.common_config import EngineConfig, ProblemSource, SamplingConfig
from passband.flows.config import Config
from passband.tasks.sampling.dispatch import SamplingWorkersConfig
from passband.tasks.sampling.passrate_job import ShardSampling
from passband.training.episodes.code_feedback import CodeFeedbackConfig
from passband.training.episodes.math_python import MathToolConfig
from passband.training.episodes.setups import EnvironmentConfig, check_environments


class TaskPool(Config):
    """One task's problem pool and what is done with it."""

    enabled: bool = True
    """Curate this task (a disabled task gets no outputs)."""
    source: ProblemSource
    """Where the pool comes from; `num_problems` is the whole pool, eval split included."""
    weight: float = Field(1.0, gt=0)
    """The task's RL set size relative to the aligned size (1.0 = the same as the others)."""
    eval_size: int = Field(8, ge=0)
    """Problems held out of the pool for evaluation before any filtering (disjoint ids)."""
    band: Band | None = None
    """Pass-rate band kept for RL, interval notation like "(0, 0.8]" (None: the task's recipe band)."""
    proportions: dict[str, float] | None = None
    """Sub-domain weights for stratified sampling (None: equal shares over the sub-domains present)."""


class PassRateConfig(Config):
    """How pass rates are estimated: n rollouts of top_k attempts each, verified."""

    sampling: SamplingConfig = SamplingConfig(n=4, temperature=1.0, max_tokens=128)
    """The rollouts: `n` per problem (the recipe: 5; SFT selection reuses them unless
    sft.selection_n is set), `max_tokens` per attempt. Its seed stays 0: each shard is seeded by its
    own key, which hashes engine.seed."""
    top_k: int = Field(1, ge=1)
    """Attempts per rollout; a rollout solves a problem if any of its attempts passes."""
    shard_size: int = Field(16, ge=1)
    """Problems per stored shard: the unit of reuse when a run is repeated or resumed."""

    @model_validator(mode="after")
    def _keyed_sampling(self) -> "PassRateConfig":
        keyed_sampling(self.sampling, "pass_rate.sampling")
        return self


def keyed_sampling(sampling: SamplingConfig, where: str) -> None:
    """Refuse what a shard's key would not record: its own seed (each shard is seeded by its key) and
    ignore_eos (the curate flow never samples past EOS)."""
    if sampling.seed != 0:
        raise ValueError(f"{where}.seed is {sampling.seed}: each shard is seeded by its key; set engine.seed instead")
    if sampling.ignore_eos:
        raise ValueError(f"{where}.ignore_eos: curation never samples past EOS; leave it false")


class SFTSelectionConfig(Config):
    """Selection of SFT traces from the pass-rate rollouts, and the stage split."""

    enabled: bool = True
    """Build the SFT sets."""
    selection_n: int | None = Field(None, ge=2)
    """Samples per problem for the SFT rule 0 < npass < n, drawn separately from the pass-rate
    estimate (the recipe: n=5 for bands, n=16 for SFT selection); None reuses the pass-rate samples."""
    stage2_bands: list[str] = ["hard"]
    """Difficulty bands whose rollout traces go to stage 2 (with synthetic and correction data)."""
    system_prompt: str | None = None
    """System message of rollouts and SFT rows (None: the model's default)."""
    structure_sections: list[tuple[str, str]] = []
    """(open, close) markers every trace must contain, e.g. [["<think>", "</think>"]]."""
    min_topic_words: int = Field(1, ge=0)
    """ifeval consistency: content words a response must share with its prompt."""
    perplexity: bool = True
    """Record the student's perplexity on every kept trace."""
    max_perplexity: float | None = Field(None, gt=0)
    """Drop traces above this student perplexity (None: no cap)."""


class CorrectionConfig(Config):
    """Failure-driven correction: more attempts on problems the student never solved."""

    enabled: bool = True
    """Build the correction set."""
    max_problems: int = Field(16, ge=0)
    """Failed problems per task to retry (the first ones in pool order)."""
    sampling: SamplingConfig = SamplingConfig(n=8, temperature=1.0, max_tokens=128)
    """The retries: `n` attempts per failed problem, one attempt per rollout. Its seed stays 0
    (shards are seeded by their keys)."""

    @model_validator(mode="after")
    def _keyed_sampling(self) -> "CorrectionConfig":
        keyed_sampling(self.sampling, "correction.sampling")
        return self


class SyntheticConfig(Config):
    """Synthetic SFT queries from the suites' templates, answered by a teacher, verified."""

    enabled: bool = True
    """Build the synthetic set."""
    num_queries: int = Field(16, ge=0)
    """Queries per task (the pool's generator at seed + seed_offset)."""
    seed_offset: int = 1000
    """Added to the pool's seed so synthetic queries are fresh draws of the same templates."""
    framings: list[str] = ["{prompt}", "Question: {prompt}"]
    """Phrasing templates with a {prompt} placeholder, applied round-robin."""
    sampling: SamplingConfig = SamplingConfig(n=4, temperature=1.0, max_tokens=128)
    """The teacher's responses: `n` per query. Its seed stays 0 (shards are seeded by their keys)."""

    @model_validator(mode="after")
    def _keyed_sampling(self) -> "SyntheticConfig":
        keyed_sampling(self.sampling, "synthetic.sampling")
        return self


def _check_user_pool(task_name: str, source: ProblemSource) -> None:
    """A task of the user's has no built-in suite: its pool is a file (or dataset) whose rows it names."""
    if source.path is None:
        raise ValueError(f"tasks.{task_name}: a task of your own has no built-in suite; set "
                         f"tasks.{task_name}.source.path to its rows and source.task to {task_name!r}")


def _default_pool(suite: str, difficulty: int | str) -> TaskPool:
    return TaskPool(source=ProblemSource(suite=suite, num_problems=40, difficulty=difficulty))


class CurateConfig(Config):
    """Build RL, SFT and eval sets from problem pools, by the pass rates of the model to be trained."""

    model: str = "smollm2-135m-instruct"
    """The checkpoint that will be trained next (its pass rates decide): shipped name, URI or dir."""
    teacher: str | None = None
    """Model answering synthetic and correction queries (None: the student, for alignment)."""
    tasks: dict[str, TaskPool] = {
        "math": _default_pool("math", 0), "code": _default_pool("code", 0), "ifeval": _default_pool("ifeval", "easy")}
    """Task name -> its pool. A catalog task, or a task of your own (docs/your-reward.md: a `passband.tasks`
    entry point or an import path, its pool a file with `source.task` naming it; PASSBAND_ALLOW_USER_CODE=1).
    Default: math at difficulty 0 with plain answers, tiny code functions, the easy instruction constraints."""
    pass_rate: PassRateConfig = PassRateConfig()
    """Pass-rate sampling."""
    engine: EngineConfig = EngineConfig()
    """Rollout engine for pass rates, corrections and synthetic responses."""
    sampling: SamplingWorkersConfig = SamplingWorkersConfig()
    """Where those shards are sampled: the flow's own engine or Prefect task workers."""
    prefilter: PrefilterConfig = PrefilterConfig()
    """Optional pre-filter on a carried pass-rate column."""
    difficulty_edges: list[float] = [0.0, 0.3, 0.7, 1.0]
    """Pass-rate edges of the difficulty labels: p=0 unsolved, (0,e1] hard, ..., p=1 solved."""
    difficulty_labels: list[str] = ["unsolved", "hard", "medium", "easy", "solved"]
    """len(edges) + 1 labels, from never solved to always solved."""
    histogram_bins: int = Field(10, ge=1)
    """Bins of the pass-rate histogram."""
    balance: BalanceConfig = BalanceConfig()
    """Stratification and size alignment of the RL sets."""
    hygiene: HygieneConfig = HygieneConfig()
    """Dedup and decontamination."""
    sft: SFTSelectionConfig = SFTSelectionConfig()
    """SFT selection and stages."""
    correction: CorrectionConfig = CorrectionConfig()
    """Failure-driven correction set."""
    synthetic: SyntheticConfig = SyntheticConfig()
    """Synthetic queries and teacher responses."""
    holdout_seed: int = 0
    """Seed of the eval hold-out draw."""
    math_tool: MathToolConfig | None = Field(None, exclude_if=lambda tool: tool is None)
    """Math pass rates over whole episodes with the Python tool, as RL's `math_tool` rolls them out
    (docs/multi-turn.md): each attempt is an episode graded on its answer turn, so the bands and the
    RL set are the tool task's, and math's SFT rollout traces are whole verified episodes, token-exact
    (trained on the sampled turns only). None: single-turn."""
    code_feedback: CodeFeedbackConfig | None = Field(None, exclude_if=lambda feedback: feedback is None)
    """Code pass rates over whole episodes with test feedback, as RL's `code_feedback`: each attempt
    graded on its last try; code's SFT rollout traces are whole passing episodes, token-exact. None:
    single-turn."""
    environments: dict[str, EnvironmentConfig] = Field({}, exclude_if=lambda environments: not environments)
    """Tasks whose pass rates run over episodes of your own environment, as RL's `environments`
    (docs/multi-turn.md); their SFT rollout traces are whole passing episodes. {}: none."""
    force: bool = False
    """Recompute even if this exact stage completed before (shards are still reused)."""

    @model_validator(mode="after")
    def _consistent(self) -> "CurateConfig":
        check_environments(self.math_tool, self.code_feedback, self.environments)
        if not self.pools():
            raise ValueError(f"every task is disabled; enable at least one of {sorted(self.tasks)}")
        for task_name, pool in self.pools().items():
            source = pool.source
            if task_name not in TASKS:
                _check_user_pool(task_name, source)
            if source.path is None and source.suite not in (task_name, "humaneval" if task_name == "code" else task_name):
                raise ValueError(f"tasks.{task_name}.source.suite is {source.suite!r}; it must be {task_name!r}")
            if source.path is not None and source.task != task_name:
                raise ValueError(f"tasks.{task_name}.source.task is {source.task!r}; it must be {task_name!r}")
            if pool.source.num_problems != "all" and pool.eval_size >= pool.source.num_problems:
                raise ValueError(f"tasks.{task_name}.eval_size ({pool.eval_size}) must be below "
                                 f"tasks.{task_name}.source.num_problems ({pool.source.num_problems})")
        return self

    @model_validator(mode="after")
    def _known_tasks(self) -> "CurateConfig":
        from passband.curation.catalog.user import names_user_code  # reads installed metadata

        unknown = sorted(name for name in self.tasks if name not in TASKS and not names_user_code(name))
        if unknown:
            raise ValueError(f"tasks keys must be catalog tasks {sorted(TASKS)}, passband.tasks entry points or import "
                             f"paths module:attribute (got {unknown})")
        return self

    def pools(self) -> dict[str, TaskPool]:
        """The enabled task pools by task name."""
        return {name: pool for name, pool in self.tasks.items() if pool.enabled}

    def difficulty_bands(self) -> DifficultyBands:
        """The difficulty labels by pass rate (`difficulty_edges`, `difficulty_labels`)."""
        return DifficultyBands(edges=tuple(self.difficulty_edges), labels=tuple(self.difficulty_labels))

    def shard_sampling(self, sampling: SamplingConfig, top_k: int) -> ShardSampling:
        """Everything that changes the samples of `sampling` on the flow's engine, for the shard key
        and the sampler; the key's base seed is engine.seed (each shard is then seeded by its key)."""
        return ShardSampling(sampling=sampling.model_copy(update={"seed": self.engine.seed}), top_k=top_k,
                             engine_kind=self.engine.kind, engine_dtype=self.engine.resolved_dtype(),
                             engine_split_kv=self.engine.kind == "vllm" and self.engine.split_kv_attention,
                             engine_lm_head_fp32=self.engine.lm_head_fp32)

    def pass_rate_sampling(self) -> ShardSampling:
        """The student's pass-rate sampling: `pass_rate`'s, with the tasks run as episodes (math_tool,
        code_feedback, environments); the teacher's draws (corrections, synthetic) stay single-turn."""
        return self.shard_sampling(self.pass_rate.sampling, self.pass_rate.top_k).model_copy(
            update={"math_tool": self.math_tool, "code_feedback": self.code_feedback,
                    "environments": self.environments})

    def verifiers(self) -> VerifierSettings:
        """Verifier settings that read math answers the way the math pool's prompts ask for them."""
        math = self.tasks.get("math")
        return VerifierSettings(math={"answer_format": math.source.answer_format if math else "plain"})
