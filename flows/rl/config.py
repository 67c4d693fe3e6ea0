"""Settings of the `rl` flow (docs/recipe.md sections 4-7): data mix, rollouts, the update, rewards,
checkpoints and held-out evaluation. The update's own settings are `training.rl.config.RLAlgoConfig`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import Field, model_validator

from passband.curation.catalog import TASKS, TaskName, VerifierSettings
from passband.flows.common_config import EngineConfig, ProblemSource, SamplingConfig
from passband.flows.config import Config
from passband.flows.evaluate.config import EvalConfig, check_answer_format
from passband.tasks.rollouts.settings import RolloutSettings
from passband.tasks.sampling.dispatch import RolloutWorkersConfig
from passband.training.episodes.code_feedback import CodeFeedbackConfig
from passband.training.episodes.math_python import MathToolConfig
from passband.training.episodes.setups import EnvironmentConfig, check_environments
from passband.training.judge.config import JudgeConfig
from passband.training.rl.config import RLAlgoConfig
from passband.training.rl.batches.dynamic_sampling import DynamicSamplingConfig
from passband.training.rl.batches.overlong import OverlongShaping
from passband.training.rl.batches.partial import PartialRolloutConfig
from passband.training.runtime.config import DistributedConfig

# Settings that change how a run proceeds, not what it produces: left out of the cache and run keys
# (`distributed`: N ranks give the one-process weights up to float summation order, and a checkpoint
# written under any rank count resumes under any other).
RUN_CONTROL_FIELDS = {"force", "resume", "max_iterations_this_run", "distributed"}


class RewardConfig(Config):
    """How rollouts are scored: by the task verifiers (curation.verifiers.verify), or by a judge model."""

    verifiers: VerifierSettings = VerifierSettings()
    """Each task's verifier settings. math.answer_format picks the extraction rule (plain -> last
    number, boxed -> last \\boxed{}): training and eval math suites must ask for the same."""
    mask_truncated: bool = True
    """Mask rollouts that hit max_tokens out of the gradient (docs/recipe.md section 4: a cut output is unparsable)."""
    invalid_reward: Literal["mask", "zero"] = "mask"
    """What a rollout without a verdict (unparsable, error, timeout; truncated under mask_truncated) trains
    as. 'mask': left out of the gradient entirely, as docs/recipe.md section 4 says: a reward given to it
    gives its group non-zero advantages that teach the wrong thing (a format failure is not a wrong answer,
    and an errored verifier is not the policy's fault). 'zero': reward 0 and kept in the gradient (TRL's and
    verl's choice), so its group's other rollouts are pushed above it and its own probability down. That
    helps when the unparsable fraction rises: under 'mask' the probability taken off wrong-but-readable
    answers can flow into unreadable ones with nothing pushing back. Either way `unparsable_frac` counts
    them; `num_masked_unparsable` counts the masked ones only."""
    # The two overlong settings are left out of the dump at their defaults (masked for every task),
    # so a run without them keeps its resolved config, run key and checkpoints byte for byte.
    overlong: OverlongShaping = Field(OverlongShaping(), exclude_if=lambda shaping: shaping == OverlongShaping())
    """Every task's default for what an answer cut at sampling.max_tokens trains as
    (training/rl/batches/overlong.py, docs/recipe.md section 4.4): `truncated: masked` (as
    mask_truncated says; the default), `zero` (reward 0, kept in the gradient) or `soft` (DAPO's soft
    overlong punishment over the last `buffer_tokens` before max_tokens, added to the task reward).
    Logged per task as `{task}/overlong_penalised` (and, under soft, `{task}/overlong_penalty_mean`)."""
    overlong_tasks: dict[str, OverlongShaping] = Field({}, exclude_if=lambda tasks: not tasks)
    """Task -> its own overlong shaping in place of `overlong` (e.g. `{math: {truncated: soft,
    buffer_tokens: 32}}`); a task not named takes `overlong`."""
    # Left out of the dump while empty, so a run without judges keeps its resolved config, and with
    # it its run key and checkpoints, byte for byte.
    judges: dict[TaskName, JudgeConfig] = Field({}, exclude_if=lambda judges: not judges)
    """Task -> a judge model that scores that task's rollouts instead of its verifier (docs/recipe.md
    section 9): n analyses by the rubric per rollout, aggregated by mean or scaled verification; an
    unreadable judgement is `unparsable` and masked. The judge's texts are logged per iteration as
    `judge/iter-NNNNNN.jsonl`. The held-out evaluation's judges are `eval.judges`."""

    def overlong_shaping(self, tasks: Iterable[str]) -> dict[str, OverlongShaping]:
        """Each of `tasks`' overlong shaping: its own in `overlong_tasks`, else the run-wide `overlong`."""
        return {task: self.overlong_tasks.get(task, self.overlong) for task in tasks}

    def check_overlong(self, datasets: Iterable[str], max_tokens: int) -> None:
        """One line when `overlong_tasks` names a task not trained on or a buffer does not fit below max_tokens."""
        stray = sorted(set(self.overlong_tasks) - set(datasets))
        if stray:
            raise ValueError(f"reward.overlong_tasks names {stray}, which are not in datasets {sorted(datasets)}")
        self.overlong.check_limit(max_tokens, "reward.overlong")
        for task, shaping in self.overlong_tasks.items():
            shaping.check_limit(max_tokens, f"reward.overlong_tasks.{task}")


class KeepRolloutsConfig(Config):
    """Every iteration's rollouts kept as one Parquet artifact per run (tasks/steps/rollouts_log.py,
    docs/rl-rollouts.md), its URI the run's `rollouts_uri` tag; a sample of each iteration's shown as
    a Prefect markdown artifact. `passband rollouts RUN` prints them."""

    enabled: bool = True
    """Keep them (false: no artifact, no sample; the run's metrics are the same either way)."""
    num_random: int = Field(3, ge=0)
    """Rollouts drawn at random per task for the iteration's markdown sample, besides its best and worst."""


class EarlyStopConfig(Config):
    """The entropy ceiling (docs/recipe.md section 7): fit R = -a exp(H) + b over the run's
    (entropy, reward) history and stop when the reward is near the predicted ceiling b - a while
    entropy keeps falling. The fit is logged either way (`entropy_ceiling/*`)."""

    enabled: bool = False
    """Stop early on the signal (false: only fit and log it)."""
    reward_metric: str = "reward"
    """Per-iteration metric that plays R (the batch reward over all tasks, invalid rows as 0)."""
    margin: float = Field(0.02, ge=0)
    """Stop when the latest reward is at least ceiling - margin."""
    patience: int = Field(3, ge=1)
    """...and entropy fell at each of the last `patience` iterations."""


class DriftConfig(Config):
    """Drift alerts (training/rl/monitoring/drift.py): each task's unparsable_frac, truncated_frac and mean response length
    against its mean over the run's first iterations. An alert is a warning, the MLflow tag `drift_alert` and a
    Prefect markdown artifact; the numbers of the run are the same either way."""

    baseline_iterations: int = Field(3, ge=1)
    """Iterations whose mean is each series' baseline; alerts start once `window` iterations followed them."""
    window: int = Field(3, ge=1)
    """Iterations whose mean is compared with the baseline (1: each iteration alone). A few rollouts
    per task make single iterations swing: on the demo's RL one iteration's code length reached 1.58x
    its baseline, while no 3 in a row averaged above 1.42x (training/rl/monitoring/drift.py)."""
    frac_margin: float = Field(0.2, gt=0)
    """Alert when a task's unparsable_frac or truncated_frac is more than this above its baseline (absolute)."""
    length_margin: float = Field(0.5, gt=0)
    """Alert when a task's mean response length is more than this fraction above its baseline."""
    stop_run: bool = False
    """Also stop the run (with a checkpoint) at the first alert, as early_stop does."""


class RolloutConfig(RolloutWorkersConfig):
    """Where rollouts run and how far ahead of the trainer."""

    max_off_policy_steps: int = Field(0, ge=0)
    """k: sample iteration i's rollouts with the weights of k updates ago (v<i-1-k>), on a thread
    that keeps them coming while the trainer updates (tasks/rollouts/ahead.py; training/rl/batches/staleness.py).
    0: the synchronous loop (sample, train, sync), same numbers as before the setting existed.
    The trainer recomputes pi_old, and the mismatch correction (`algo.correction`) sees the
    staleness in rho; the engine keeps its weights while the trainer runs
    (`engine.release_weights_while_training` applies to k = 0 only), and k + 1 versions are kept on disk.
    A checkpoint keeps the rollouts already sampled ahead (in flight), and a resumed run trains on
    them, so it gets the uninterrupted run's batches and weight versions. On long responses take
    `algo.correction: token_mis`: one update stale at 512 tokens, seq-MIS rejected 16% of the
    sequences and token-MIS none (docs/benchmarks.md, "Staleness")."""
    partial: PartialRolloutConfig | None = Field(None, exclude_if=lambda partial: partial is None)
    """Partial rollouts (training/rl/batches/partial.py; docs/recipe.md section 5.6): sample in rounds of
    `chunk_tokens`, end the iteration once `min_complete` of its groups are complete, and carry the answers
    still being written into the next iteration, continued under the new weights; every token keeps the
    weights version and engine log-prob it was sampled with. None: every answer sampled to its end within
    its iteration. Single-turn tasks, with max_off_policy_steps 0 and no dynamic_sampling."""


class RLConfig(Config):
    """Multi-task RL: rollouts from the engine, verifier rewards, clipped-surrogate updates, weight sync."""

    model: str = "smollm2-135m-instruct"
    """Starting checkpoint (also the KL reference): `smollm2-135m-instruct`, an SFT checkpoint URI, or a dir."""
    datasets: dict[str, str | ProblemSource] = {
        # 160: difficulty 0's balanced draw holds 32 combinatorics problems, so 5 x 32 (256 ran out)
        "math": ProblemSource(suite="math", num_problems=160, seed=0, difficulty=0),
        "code": ProblemSource(suite="code", num_problems=128, seed=0, difficulty=0),
        "ifeval": ProblemSource(suite="ifeval", num_problems=128, seed=0, difficulty="easy"),
    }
    """Task (a catalog task: math, code, ifeval, structured, ...) -> curate's `rl_<task>` artifact
    URI or a problem source."""
    task_weights: dict[str, float] = {}
    """Task -> share of every batch's prompts (relative; a task not listed weighs 1)."""
    system_prompt: str | None = None
    """System message for the chat template (None: the model's default)."""
    prompts_per_step: int = Field(8, ge=1)
    """Prompts per outer iteration (P); the batch holds P x sampling.n rollouts."""
    num_iterations: int = Field(10, ge=1)
    """Outer iterations (rollouts -> scoring -> algo.num_inner_steps updates -> weight sync)."""
    seed: int = 0
    """Seed of the prompt order, Clip-Cov's choices and (hf engine) each iteration's sampling."""
    sampling: SamplingConfig = SamplingConfig(n=8, temperature=1.0, max_tokens=96)
    """How rollouts are sampled; `n` is G, the rollouts per prompt (advantages are relative to the
    prompt's group). The seed is set per iteration from `seed` (see the flow)."""
    engine: EngineConfig = EngineConfig(kv_cache_gib="batch", in_process=True)
    """Rollout engine; it lives beside the trainer, so its KV cache holds one rollout batch and no more,
    and it runs inside the flow's process (no second copy of python, torch and vLLM in processes of
    its own; see EngineConfig.in_process)."""
    dynamic_sampling: DynamicSamplingConfig | None = None
    """DAPO's dynamic sampling (training/rl/batches/dynamic_sampling.py): sample rounds of prompts until the
    batch holds `prompts_per_step` groups whose rewards differ (None: one round, every group trained
    on; `algo.skip_zero_gradient_rows` then skips the zero-variance groups' compute)."""
    math_tool: MathToolConfig | None = Field(None, exclude_if=lambda tool: tool is None)
    """Math rows as multi-turn episodes with a Python tool run in the sandbox (docs/multi-turn.md): a
    turn may call it, the first turn without a call is the answer, rewarded by the math verifier;
    only the sampled tokens are trained. None: every row single-turn."""
    code_feedback: CodeFeedbackConfig | None = Field(None, exclude_if=lambda feedback: feedback is None)
    """Code rows as multi-turn episodes with test feedback (docs/multi-turn.md): a failing attempt is
    answered with what failed and the model tries again, up to `environment.max_attempts`; the last
    attempt is rewarded by the code verifier; only the sampled tokens are trained. None: single-turn."""
    environments: dict[str, EnvironmentConfig] = Field({}, exclude_if=lambda environments: not environments)
    """Tasks whose rows run as episodes of your own environment, task -> EnvironmentConfig (an import
    path and an episode budget; docs/multi-turn.md): rolled out, trained and evaluated as math_tool's
    episodes are, rewarded by the task's verifier on the last turn. {}: none."""
    rollout: RolloutConfig = RolloutConfig()
    """Rollouts beside the trainer: how far ahead of it they may run."""
    algo: RLAlgoConfig = RLAlgoConfig(lr=5e-6)
    """The update: objective, clipping, inner steps, mismatch correction, KL, entropy options."""
    distributed: DistributedConfig = DistributedConfig()
    """Trainer ranks: nproc_per_node > 1 runs the update under torchrun, the policy (and the reference)
    sharded by FSDP2, on long-lived ranks the flow drives (tasks/steps/rl_torchrun.py); the flow keeps
    the engine, the verifiers, MLflow and the checkpoint commits."""
    reward: RewardConfig = RewardConfig()
    """Verifier settings."""
    checkpoint_every: int = Field(5, ge=0)
    """Commit a checkpoint every this many iterations (0: only at eval points and the end)."""
    early_stop: EarlyStopConfig = EarlyStopConfig()
    """The entropy-ceiling fit, and the optional early stop on it."""
    drift: DriftConfig = DriftConfig()
    """Alerts when a task's unparsable or truncated fraction or its length rises; optionally a stop."""
    keep_rollouts: KeepRolloutsConfig = KeepRolloutsConfig()
    """What the policy wrote: every rollout kept, readable with pandas, pyarrow or DuckDB."""
    eval: EvalConfig | None = EvalConfig(sampling=SamplingConfig(n=4, temperature=1.0, max_tokens=96))
    """Held-out evaluation before the first iteration, every `eval_every` iterations and after the
    last (None: skip; then best_checkpoint is the final one); training prompts equal to an eval
    prompt are dropped. Its verifiers score the eval sets, `reward.verifiers` the rollouts."""
    eval_every: int = Field(0, ge=0)
    """Evaluate (and checkpoint) every this many iterations; 0: only before and after."""
    best_metric: str = "mean/pass@1"
    """Higher is better; `mean/pass@k` (mean over eval sets) or `<eval set>/pass@k`. The
    checkpoint that maximizes it is the `best_checkpoint` output."""
    resume: bool = True
    """Continue from the newest committed checkpoint of this exact config; false starts over."""
    force: bool = False
    """Run even when this exact config already completed (otherwise its summary is reused)."""
    max_iterations_this_run: int | None = Field(None, ge=1)
    """Stop (with a checkpoint) after this many iterations of this run; a rerun continues.
    The summary's status is then 'partial' and nothing is cached."""

    @model_validator(mode="after")
    def _check(self) -> "RLConfig":
        from passband.curation.catalog.user import names_user_code  # reads installed metadata

        scored = {*TASKS, *self.reward.verifiers.rewards}
        unknown = sorted(name for name in self.datasets if name not in scored and not names_user_code(name))
        if not self.datasets or unknown:
            raise ValueError(f"datasets keys must be catalog tasks {sorted(TASKS)}, tasks reward.verifiers.rewards "
                             "scores, passband.tasks entry points or import paths module:attribute "
                             f"(got {sorted(self.datasets)})")
        unjudged = sorted(set(self.reward.judges) - set(self.datasets))
        if unjudged:
            raise ValueError(f"reward.judges names {unjudged}, which are not in datasets {sorted(self.datasets)}; "
                             "judge a task the run trains on")
        stray = sorted(set(self.task_weights) - set(self.datasets))
        if stray or any(w <= 0 for w in self.task_weights.values()):
            raise ValueError(f"task_weights must be positive and name tasks in datasets (bad: {stray or self.task_weights})")
        check_environments(self.math_tool, self.code_feedback, self.environments)
        if self.rollout.partial is not None:
            self._check_partial()
        if self.distributed.sequence_parallel > 1 and self.algo.pack_rows is False:
            raise ValueError(f"algo.pack_rows: false, but distributed.sequence_parallel {self.distributed.sequence_parallel} "
                             "splits each micro-batch's packed rows over its ranks: set algo.pack_rows: auto or true")
        self.reward.check_overlong(self.datasets, self.sampling.max_tokens)
        if self.sampling.n < 2:
            raise ValueError(f"sampling.n={self.sampling.n}: GRPO needs at least 2 rollouts per prompt (a group)")
        if self.sampling.temperature <= 0:
            raise ValueError("sampling.temperature must be > 0: the trainer's log-probs need a sampled distribution")
        check_answer_format([s for s in self.datasets.values() if isinstance(s, ProblemSource)], self.reward.verifiers,
                            "reward.verifiers")
        if self.eval is not None:
            self._check_best_metric(self.eval)
        if self.engine.weight_transfer == "nccl":
            self._check_broadcast()
        if self.engine.weight_transfer == "memory":
            self._check_memory_transfer()
        if self.publishes_adapter and self.engine.kind != "vllm":
            raise ValueError(f"algo.lora.engine_weights: adapter is served by vLLM's LoRA support; engine.kind is "
                             f"{self.engine.kind!r}: set engine.kind: vllm or algo.lora.engine_weights: merged")
        if self.algo.lora is not None and self.distributed.launches_ranks:
            raise ValueError("algo.lora trains in the flow's own process, not on torchrun ranks (distributed."
                             "nproc_per_node > 1 or torchrun_at_one_rank): the ranks' sharding, gather and broadcast "
                             "handle full weights only; set distributed.nproc_per_node: 1 (the frozen base and the "
                             "adapters of a 7-8B model fit one 80 GB GPU: flows/presets/rl/gpu-lora.yaml)")
        return self

    def _check_partial(self) -> None:
        """Partial rollouts carry single-turn answers between synchronous iterations: what they would meet
        elsewhere (episodes between environment turns, a thread sampling ahead, rounds that drop groups)
        is refused, one setting named."""
        clash = ("dynamic_sampling" if self.dynamic_sampling is not None else
                 "rollout.max_off_policy_steps" if self.rollout.max_off_policy_steps else
                 "math_tool" if self.math_tool is not None else "code_feedback" if self.code_feedback is not None else
                 "environments" if self.environments else None)
        if clash is not None:
            raise ValueError(f"rollout.partial carries single-turn answers between synchronous iterations; it does not "
                             f"combine with {clash} (set one of them off)")

    def _check_broadcast(self) -> None:
        """Weights by NCCL go from the trainer ranks to the flow's own vLLM engine, newest only."""
        needs = {"engine.kind: vllm": self.engine.kind == "vllm",
                 "torchrun ranks (distributed.nproc_per_node > 1 or torchrun_at_one_rank)":
                     self.distributed.launches_ranks,
                 "rollout.workers: local (workers on other machines read versions from the store)":
                     self.rollout.workers == "local",
                 "rollout.max_off_policy_steps: 0 (the rollouts ahead sample older versions, kept on disk)":
                     self.rollout.max_off_policy_steps == 0,
                 "engine.lm_head_fp32: false (vLLM's loader casts the received head to the engine's dtype)":
                     not self.engine.lm_head_fp32}
        missing = [need for need, met in needs.items() if not met]
        if missing:
            raise ValueError(f"engine.weight_transfer: nccl needs {'; '.join(missing)}")

    def _check_memory_transfer(self) -> None:
        """Weights in memory go from the flow's own trainer to the engine in the same process, newest only."""
        needs = {"engine.kind: vllm": self.engine.kind == "vllm",
                 "engine.in_process: true (the engine shares the trainer's process)": self.engine.in_process,
                 "one trainer process (distributed.nproc_per_node: 1)": not self.distributed.launches_ranks,
                 "rollout.workers: local (workers elsewhere read versions from the store)":
                     self.rollout.workers == "local",
                 "rollout.max_off_policy_steps: 0 (the rollouts ahead sample older versions, kept on disk)":
                     self.rollout.max_off_policy_steps == 0,
                 "algo.lora.engine_weights: merged (an adapter version is a folder vLLM's LoRA loads)":
                     not self.publishes_adapter}
        missing = [need for need, met in needs.items() if not met]
        if missing:
            raise ValueError(f"engine.weight_transfer: memory needs {'; '.join(missing)}")

    def _check_best_metric(self, evaluation: EvalConfig) -> None:
        name, _, stat = self.best_metric.partition("/")
        valid_names = {"mean", *evaluation.set_names()}
        if name not in valid_names or not stat.startswith("pass@") or not stat[5:].isdigit():
            raise ValueError(f"best_metric {self.best_metric!r} must be '<name>/pass@<k>' with name in {sorted(valid_names)}")
        if not 1 <= int(stat[5:]) <= evaluation.sampling.n:
            raise ValueError(f"best_metric {self.best_metric!r} needs 1 <= k <= eval.sampling.n={evaluation.sampling.n}")

    @property
    def publishes_adapter(self) -> bool:
        """Whether each weight version is LoRA's adapter alone, served by the engine on its base."""
        return self.algo.lora is not None and self.algo.lora.engine_weights == "adapter"

    @property
    def group_size(self) -> int:
        """G, the rollouts per prompt (sampling.n)."""
        return self.sampling.n

    def weights(self) -> dict[str, float]:
        """Every task's weight (1 where task_weights does not name it)."""
        return {task: self.task_weights.get(task, 1.0) for task in sorted(self.datasets)}

    def rollout_settings(self) -> RolloutSettings:
        """What the rollout code below the flow reads of this config (tasks/rollouts/settings.py)."""
        return RolloutSettings(
            seed=self.seed, task_weights=self.weights(), prompts_per_step=self.prompts_per_step,
            system_prompt=self.system_prompt, sampling=self.sampling, verifiers=self.reward.verifiers,
            math_tool=self.math_tool, code_feedback=self.code_feedback, environments=self.environments,
            dynamic_sampling=self.dynamic_sampling, overlong=self.reward.overlong_shaping(self.datasets),
            mask_truncated=self.reward.mask_truncated, invalid_reward=self.reward.invalid_reward,
            partial=self.rollout.partial)
