"""Partial rollouts: an iteration ends its sampling once enough groups are complete, and the answers
still being written carry into the next iteration, continued under the new weights (Kimi k1.5's
partial rollouts, AReaL's interruptible generation).

Sampling runs in rounds of `chunk_tokens`: each round every unfinished answer grows by at most that
many tokens, continued from its exact tokens (the engine's token-id prompts: never re-tokenized).
After a round, a group whose G answers all ended (a stop, or the sampling's max_tokens) is complete;
once `ceil(min_complete x prompts_per_step)` groups are, the iteration trains on the complete ones
and carries the rest. The next iteration draws only what tops its groups back up to
`prompts_per_step`, so the groups in flight never exceed P.

The interruption is counted in tokens, not seconds, so it is reproducible: a rerun with the same
settings cuts the same answers at the same tokens, and gives the same tokens wherever the engine
is batch-invariant. Every token keeps the engine log-prob and the weights version it was sampled
with (`Sample.token_versions`): the mismatch correction divides by each token's own behaviour
probability, and a token's staleness is iteration - 1 - its version. A group carried
`max_carries` times is sampled to its end in the next iteration, so no token is more than
`max_carries` updates stale.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from passband.training.engines.protocol import Sample


class PartialRolloutConfig(BaseModel):
    """End an iteration's sampling when enough groups are complete; carry the unfinished answers on."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    chunk_tokens: int = Field(256, ge=1)
    """Tokens every unfinished answer may grow by in one sampling round: the points where an
    iteration may end. Smaller ends closer to the moment enough groups are done, at the cost of
    more engine calls (each re-reads its context: prefill)."""
    min_complete: float = Field(0.75, gt=0.0, le=1.0)
    """The iteration ends after the first round where this share of `prompts_per_step` groups is
    complete (rounded up); 1.0 waits for every group (the batch is then always P groups)."""
    max_carries: int = Field(2, ge=1)
    """Iterations a group may be carried into; the last one samples it to its end. The staleness
    bound: no token trains more than this many updates after the weights that sampled it."""


@dataclass
class OpenGroup:
    """One prompt's group while its answers are being written."""

    row: dict[str, Any]
    prompt_ids: list[int]
    """The chat-templated prompt's tokens (every continuation starts from them)."""
    samples: list[Sample]
    """G answers so far; each `token_versions` says which weights sampled each token."""
    carries: int = 0
    """Iterations this group was carried into so far."""
    drawn_at: int = 0
    """The iteration that drew its prompt."""

    def answer_done(self, sample: Sample, max_tokens: int) -> bool:
        return sample.finish_reason == "stop" or len(sample.token_ids) >= max_tokens

    def complete(self, max_tokens: int) -> bool:
        return all(self.answer_done(sample, max_tokens) for sample in self.samples)

    def to_json(self) -> dict[str, Any]:
        return {"row": self.row, "prompt_ids": self.prompt_ids, "samples": [asdict(s) for s in self.samples],
                "carries": self.carries, "drawn_at": self.drawn_at}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OpenGroup:
        return cls(data["row"], list(data["prompt_ids"]), [Sample(**s) for s in data["samples"]], data["carries"],
                   data["drawn_at"])


def needed_complete(prompts_per_step: int, min_complete: float) -> int:
    """Complete groups that end an iteration's sampling."""
    return math.ceil(min_complete * prompts_per_step - 1e-9)


def chunk_budget(sample: Sample, max_tokens: int, chunk_tokens: int, to_the_end: bool) -> int:
    """Tokens the next round may add to `sample`: a chunk, or what is left of max_tokens when the
    group must finish this iteration."""
    left = max_tokens - len(sample.token_ids)
    return left if to_the_end else min(chunk_tokens, left)


def extend(sample: Sample, chunk: Sample, version: int, max_tokens: int) -> Sample:
    """`sample` continued by `chunk` (sampled from its tokens by weights `version`): tokens, log-probs and
    text appended, each new token tagged with `version`; it ends as the chunk ended, except that a
    chunk cut at its own budget is 'length' (truncated) only where the answer reached max_tokens."""
    token_ids = sample.token_ids + chunk.token_ids
    ended = "stop" if chunk.finish_reason == "stop" else ("length" if len(token_ids) >= max_tokens else "open")
    return Sample(sample.prompt_index, sample.sample_index, token_ids, sample.text + chunk.text,
                  sample.logprobs + chunk.logprobs, ended, sample.prompt_token_ids,
                  token_versions=list(sample.token_versions or []) + [version] * len(chunk.token_ids))


def first_chunk(chunk: Sample, version: int, max_tokens: int) -> Sample:
    """A new answer's first round (its tokens sampled by weights `version`)."""
    empty = Sample(chunk.prompt_index, chunk.sample_index, [], "", [], "open", chunk.prompt_token_ids,
                   token_versions=[])
    return extend(empty, chunk, version, max_tokens)


def token_lags(sample: Sample, iteration: int) -> list[int]:
    """Updates between each token's sampling weights and the weights iteration `iteration` trains from."""
    return [iteration - 1 - version for version in sample.token_versions or []]


def spans_versions(sample: Sample) -> bool:
    """Whether the answer was written by more than one weights version."""
    return len(set(sample.token_versions or [])) > 1


def split_groups(groups: list[OpenGroup], max_tokens: int) -> tuple[list[OpenGroup], list[OpenGroup]]:
    """(complete, still open), each in the order given (carried groups before new ones: oldest first)."""
    return ([g for g in groups if g.complete(max_tokens)], [g for g in groups if not g.complete(max_tokens)])


def partial_metrics(complete: list[OpenGroup], carried: list[OpenGroup], iteration: int, rounds: int) -> dict[str, float]:
    """How often the iteration ended early and what it trained on: groups complete and carried, answers
    written by more than one version, the oldest token's lag and the rounds sampled."""
    answers = [sample for group in complete for sample in group.samples]
    lags = [lag for sample in answers for lag in token_lags(sample, iteration)]
    return {"partial/complete_groups": float(len(complete)), "partial/carried_groups": float(len(carried)),
            "partial/carried_open_answers": float(sum(s.finish_reason == "open" for g in carried for s in g.samples)),
            "partial/spanning_answers": float(sum(spans_versions(s) for s in answers)),
            "partial/spanning_frac": sum(spans_versions(s) for s in answers) / max(len(answers), 1),
            "partial/max_token_lag": float(max(lags, default=0)),
            "partial/trained_from_carried": float(sum(g.carries > 0 for g in complete)),
            "partial/rounds": float(rounds)}
