"""The environment protocol: a task that answers the model turn by turn.

From a problem row an `Environment` opens an `Episode`: the opening conversation (system and user
messages), the tools the model may call (JSON schemas, as `apply_chat_template(tools=...)` takes
them) and a `step` that receives each model turn's text. A step answers with an observation (the
messages the environment appends: a tool result, feedback) or ends the episode with a verdict.
A single-turn task is the one-turn case: its first step always ends the episode
(`single_turn.py`). The rollout loop (`rollout.py`) owns the tokens and the budgets of
`EpisodeBudget`; the environment only sees text and counts its own tool calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

Messages = list[dict[str, str]]


class EpisodeBudget(BaseModel):
    """How far one episode may run."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    max_turns: int = Field(4, ge=1)
    """Model turns per episode; the last one is graded as final (`Episode.step(final=True)`)."""
    episode_tokens: int = Field(1024, ge=1)
    """Tokens after the opening prompt, sampled and environment ones together; each turn may sample
    at most what is left (and at most the sampling config's max_tokens). An observation that would
    leave nothing ends the episode as truncated."""
    step_timeout_s: float = Field(30.0, gt=0)
    """Wall seconds one environment step may take (a tool run and its verdict); past it the episode
    ends with status 'error' (no verdict)."""
    straggler_s: float | None = Field(5.0, ge=0)
    """The next engine call waits for the other episodes' steps at most this long after the first of
    them finished; episodes whose step is still running join a later call, so a slow tool holds up
    only its own episode. On an engine whose tokens do not depend on what shares a step (fp32 or
    emulated bf16 on a CPU: README, "What a rerun reproduces") the tokens are the same either way;
    on bf16 with AMX or a GPU a straggler changes what shares a step, so set None to always wait for
    every step (each wave one call, reproducible there too)."""


@dataclass(frozen=True)
class Step:
    """What the environment answers to one model turn."""

    done: bool
    """True: the episode ends here with `reward`/`status`; False: `observation` follows."""
    observation: Messages = field(default_factory=list)
    """Messages appended after the model turn (role 'tool' or 'user'); empty when done."""
    reward: float | None = None
    """The verdict's reward when done; None where there is no verdict (unparsable, error, timeout)."""
    status: str = "continue"
    """The verifier's status when done (pass, fail, unparsable, error, timeout); 'continue' otherwise."""
    detail: str = ""
    """What the environment read or why it failed."""
    tool_calls: int = 0
    """Tool calls the model made in this turn (run or refused)."""


class Episode(Protocol):
    """One problem's conversation with the model."""

    messages: Messages
    """The opening conversation; the rollout loop renders it with `tools` and opens the model's turn."""
    tools: list[dict[str, Any]]
    """The tools offered (JSON schemas); [] for none."""

    def step(self, text: str, final: bool) -> Step:
        """Answer the model turn `text`. With `final` (the last turn the budget allows, or a truncated
        turn) the step must end the episode, grading `text` as the model's last word."""
        ...


class Environment(Protocol):
    """Opens episodes from problem rows ({id, task, prompt, reference, ...})."""

    def open(self, row: dict[str, Any]) -> Episode:
        """A fresh episode of `row` (episodes share nothing: each group member opens its own)."""
        ...
