"""The multi-turn rollout loop: open episodes' turns in shared engine calls, the environment's
steps in a thread pool, bounded per step.

The engine continues each episode from its exact token context (a token-id prompt: nothing is
re-tokenized), one sample per episode, seeded by the episode's key and the turn; then every
continued episode's step runs concurrently. The next engine call takes the episodes whose steps have
answered: it waits for the rest at most `EpisodeBudget.straggler_s` after the first answered, so a
slow tool holds up its own episode only (it joins a later call); a step past `step_timeout_s` ends
its episode with status 'error' (no verdict). The observation's tokens come from the chat template
(`tokens.environment_text`). A turn may sample at most what is left of the episode's token budget:
the call samples up to the largest budget left and each sample is cut at its own (a prefix of a
seeded sample is the sample a smaller max_tokens would have drawn), and a cut turn is truncated.
"""

from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Any

from passband.training.engines.config import SamplingConfig
from passband.training.engines.protocol import RolloutEngine, Sample
from passband.training.episodes.environment import Episode, EpisodeBudget, Messages, Step
from passband.training.episodes.tokens import (EpisodeTokens, encode_text, environment_text, opened, prompt_tokens,
                                               with_environment, with_sampled)
from passband.training.episodes.tool_calls import with_tool_instructions


@dataclass
class EpisodeResult:
    """One finished episode."""

    tokens: EpisodeTokens
    """Prompt, then sampled and environment tokens, with the loss mask and engine log-probs."""
    messages: Messages
    """The conversation as text (the opening messages as rendered, then every turn and observation)."""
    reward: float | None = None
    """The environment's reward; None where there is no verdict."""
    status: str = "continue"
    """The final step's status (pass, fail, unparsable, error, timeout)."""
    detail: str = ""
    num_turns: int = 0
    num_tool_calls: int = 0
    truncated: bool = False
    """The last turn hit a token budget (no end-of-turn token) or an observation left none."""
    env_seconds: float = 0.0
    """Wall seconds of this episode's environment steps."""
    tools: list[dict[str, Any]] = field(default_factory=list)

    @property
    def final_text(self) -> str:
        """The last model turn's text."""
        return next(m["content"] for m in reversed(self.messages) if m["role"] == "assistant")

    def token_columns(self) -> dict[str, Any]:
        """Its turns and tool calls, and its exact tokens (the opening prompt, then the sampled and
        environment tokens) with the mask that is 1 on the sampled ones: the columns that make a
        passing episode a token-exact SFT trace (curation.curate_rows: SFT_COLUMNS)."""
        return {"num_turns": self.num_turns, "num_tool_calls": self.num_tool_calls,
                "input_ids": list(self.tokens.prompt_ids) + list(self.tokens.token_ids),
                "loss_mask": [0] * len(self.tokens.prompt_ids) + list(self.tokens.loss_mask)}

    def to_sample(self, prompt_index: int, sample_index: int) -> Sample:
        """As the engine's Sample of one completion: the tokens after the prompt, their mask and log-probs."""
        return Sample(prompt_index=prompt_index, sample_index=sample_index, token_ids=self.tokens.token_ids,
                      text=self.final_text, logprobs=self.tokens.logprobs,
                      finish_reason="length" if self.truncated else "stop",
                      prompt_token_ids=self.tokens.prompt_ids, loss_mask=self.tokens.loss_mask)


def open_result(tokenizer: Any, episode: Episode) -> EpisodeResult:
    """An episode's start: its opening messages as rendered (tool instructions added where the
    template ignores tools=) and their prompt tokens."""
    messages = with_tool_instructions(tokenizer, episode.messages, episode.tools)
    return EpisodeResult(opened(prompt_tokens(tokenizer, messages, episode.tools)), messages, tools=episode.tools)


def turn_text(tokenizer: Any, sampled_ids: list[int]) -> str:
    """A turn's text for the environment and the template: its tokens decoded, without the end-of-turn token."""
    if sampled_ids and sampled_ids[-1] == tokenizer.eos_token_id:
        sampled_ids = sampled_ids[:-1]
    return tokenizer.decode(sampled_ids, skip_special_tokens=False)


def after_step(tokenizer: Any, result: EpisodeResult, text: str, final: bool, step: Step,
               budget: EpisodeBudget) -> EpisodeResult:
    """`result` after the environment answered its model turn `text` (already in result.tokens)."""
    if final and not step.done:
        raise ValueError(f"the environment did not end the episode at its final turn (status {step.status!r})")
    messages = result.messages + [{"role": "assistant", "content": text}]
    num_tool_calls = result.num_tool_calls + step.tool_calls
    if step.done:
        return replace(result, messages=messages, reward=step.reward, status=step.status, detail=step.detail,
                       num_tool_calls=num_tool_calls)
    env_ids = encode_text(tokenizer, environment_text(tokenizer, result.messages, text, step.observation, result.tools))
    if len(result.tokens.token_ids) + len(env_ids) >= budget.episode_tokens:
        return replace(result, messages=messages, reward=None, status="unparsable", truncated=True,
                       detail="the observation left no token budget", num_tool_calls=num_tool_calls)
    return replace(result, tokens=with_environment(result.tokens, env_ids), messages=messages + step.observation,
                   num_tool_calls=num_tool_calls)


def run_episodes(engine: RolloutEngine, tokenizer: Any, episodes: list[Episode], keys: list[str],
                 sampling: SamplingConfig, budget: EpisodeBudget) -> list[EpisodeResult]:
    """Run `episodes` to their end; `keys` (one per episode, distinct) seed each episode's turns.
    `sampling`'s n is ignored (one sample per episode: a group is G episodes of one row) and its
    max_tokens caps each turn. Each engine call continues the episodes whose steps have answered;
    it waits for the others' steps at most `budget.straggler_s` after the first answered (always,
    with None), and a step past `budget.step_timeout_s` ends its episode with status 'error'."""
    if len(keys) != len(episodes) or len(set(keys)) != len(keys):
        raise ValueError(f"run_episodes needs one distinct key per episode, got {len(keys)} for {len(episodes)}")
    results = [open_result(tokenizer, episode) for episode in episodes]
    # steps run in threads that are never joined here: a step past its timeout is left to finish
    # (the sandbox bounds a tool run by its own wall limit)
    pool = ThreadPoolExecutor(max_workers=max(len(episodes), 1), thread_name_prefix="episode-step")
    ready, stepping = list(range(len(episodes))), {}  # stepping: episode -> (future, started, text, final)
    while ready or stepping:
        if ready:
            for i, (text, final) in _sample_turns(engine, tokenizer, results, ready, keys, sampling, budget).items():
                stepping[i] = (pool.submit(_timed_step, episodes[i], text, final), time.monotonic(), text, final)
        ready = []
        for i, (step, seconds) in _answered(stepping, budget).items():
            _, _, text, final = stepping.pop(i)
            results[i] = replace(after_step(tokenizer, results[i], text, final, step, budget),
                                 env_seconds=results[i].env_seconds + seconds)
            if results[i].status == "continue" and not results[i].truncated:
                ready.append(i)
        ready.sort()  # episode order in the engine call, whatever order the steps answered in
    pool.shutdown(wait=False)
    return results


def _sample_turns(engine: RolloutEngine, tokenizer: Any, results: list[EpisodeResult], active: list[int],
                  keys: list[str], sampling: SamplingConfig, budget: EpisodeBudget) -> dict[int, tuple[str, bool]]:
    """One engine call continuing the `active` episodes (their results updated in place with the
    sampled tokens); episode -> (the turn's text, whether the turn is final)."""
    left = {i: budget.episode_tokens - len(results[i].tokens.token_ids) for i in active}
    wave = sampling.model_copy(update={"n": 1, "max_tokens": min(sampling.max_tokens, max(left.values()))})
    samples = engine.generate([results[i].tokens.context for i in active], wave,
                              prompt_keys=[f"{keys[i]}/turn{results[i].num_turns}" for i in active])
    turns = {}
    for i, (sample,) in zip(active, samples, strict=True):
        cap = min(left[i], sampling.max_tokens)
        ids, logprobs = sample.token_ids[:cap], sample.logprobs[:cap]
        ended = bool(ids) and ids[-1] == tokenizer.eos_token_id  # only then can the template continue it
        truncated = not ended and (sample.finish_reason == "length" or len(sample.token_ids) > cap)
        results[i] = replace(results[i], tokens=with_sampled(results[i].tokens, ids, logprobs),
                             num_turns=results[i].num_turns + 1, truncated=truncated)
        turns[i] = (turn_text(tokenizer, ids), not ended or results[i].num_turns >= budget.max_turns)
    return turns


def _timed_step(episode: Episode, text: str, final: bool) -> tuple[Step, float]:
    start = time.monotonic()
    step = episode.step(text, final)
    return step, time.monotonic() - start


def _answered(stepping: dict[int, tuple[Any, float, str, bool]], budget: EpisodeBudget) -> dict[int, tuple[Step, float]]:
    """The steps that answered, after waiting for the first of them (or its timeout) and then for the
    rest at most `budget.straggler_s` more; (step, wall seconds) each, an 'error' step for one past
    `budget.step_timeout_s`."""
    futures = {i: entry[0] for i, entry in stepping.items()}
    deadline = min(entry[1] for entry in stepping.values()) + budget.step_timeout_s
    wait(futures.values(), timeout=max(deadline - time.monotonic(), 0.0), return_when=FIRST_COMPLETED)
    rest = max(deadline - time.monotonic(), 0.0)
    wait(futures.values(), timeout=rest if budget.straggler_s is None else min(budget.straggler_s, rest))
    timeout = Step(done=True, status="error", detail=f"environment step ran past {budget.step_timeout_s} s")
    now = time.monotonic()
    return {i: future.result() if future.done() else (timeout, budget.step_timeout_s)
            for i, future in futures.items() if future.done() or now >= stepping[i][1] + budget.step_timeout_s}
