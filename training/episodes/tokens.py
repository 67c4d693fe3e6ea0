"""Token-exact episodes: the policy's sampled tokens as sampled, the environment's as the chat
template writes them, and a loss mask that is 1 exactly on the sampled ones.

An episode's tokens are P + S1 + E1 + S2 + E2 + ... + Sk: P the opening prompt (the template with
the assistant turn opened), S_t the ids the engine sampled in turn t (ending with the end-of-turn
token, eos), E_t what the template writes after that eos up to the next assistant turn's opening:
the rest of the assistant turn's closing (ChatML's "\\n"), the observation messages and the
generation prompt. Nothing sampled is ever decoded and re-encoded into the sequence: the text of
S_t is used only to render the conversation, from which E_t is read as a text suffix.

E_t holds only if the template renders the conversation as a growing string, checked every turn
(`TemplateError` otherwise, never a silent drift):
- the history up to the model turn, with the generation prompt, followed by the turn's text and eos,
  is a prefix of the conversation rendered with that turn as an assistant message;
- the conversation with the observation (and the next generation prompt) extends that rendering.
Templates that rewrite past assistant turns (dropping reasoning, trimming whitespace) or that
close consecutive tool messages only after the last one fail the first or the second check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from passband.training.episodes.environment import Messages


class TemplateError(ValueError):
    """The chat template does not render the conversation as a growing string."""


def render(tokenizer: Any, messages: Messages, tools: list[dict], add_generation_prompt: bool) -> str:
    """The conversation as the template writes it (tools=None when there are none, as a caller
    without tools would call it)."""
    return tokenizer.apply_chat_template(messages, tools=tools or None, add_generation_prompt=add_generation_prompt,
                                         tokenize=False)


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """Token ids of template text, without any BOS/EOS the tokenizer would add (the template has its markers)."""
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def prompt_tokens(tokenizer: Any, messages: Messages, tools: list[dict]) -> list[int]:
    """P: the opening conversation with the assistant turn opened."""
    return encode_text(tokenizer, render(tokenizer, messages, tools, add_generation_prompt=True))


def environment_text(tokenizer: Any, history: Messages, turn_text: str, observation: Messages,
                     tools: list[dict]) -> str:
    """What the template writes after the sampled eos of the model turn `turn_text` (its text without
    the eos) that follows `history`, through `observation` and the next generation prompt."""
    eos = tokenizer.eos_token
    opened = render(tokenizer, history, tools, add_generation_prompt=True)
    with_turn = history + [{"role": "assistant", "content": turn_text}]
    closed = render(tokenizer, with_turn, tools, add_generation_prompt=False)
    sampled_end = len(opened) + len(turn_text) + len(eos)
    if closed[:sampled_end] != opened + turn_text + eos:
        raise TemplateError(
            "the chat template does not write an assistant turn as <generation prompt> + its text + "
            f"{eos!r} after the history it was sampled from: its tokens would not be the sampled ones "
            f"(rendered {closed[len(opened) - 20:sampled_end + 20]!r})")
    answered = render(tokenizer, with_turn + observation, tools, add_generation_prompt=True)
    if not answered.startswith(closed):
        raise TemplateError(
            "the chat template rewrites the conversation when the observation is appended (it is not a "
            f"prefix of the next rendering), near {closed[-40:]!r} -> {answered[len(closed) - 40:len(closed) + 40]!r}")
    return closed[sampled_end:] + answered[len(closed):]


@dataclass(frozen=True)
class EpisodeTokens:
    """The token sequence of an episode so far."""

    prompt_ids: list[int]
    """P: the opening prompt."""
    token_ids: list[int]
    """Everything after P: sampled and environment tokens in order."""
    loss_mask: list[int]
    """1 on sampled tokens, 0 on environment tokens; aligned with token_ids."""
    logprobs: list[float]
    """The engine's log-prob of each sampled token, 0.0 on environment tokens; aligned with token_ids."""

    @property
    def context(self) -> list[int]:
        """What the engine continues from: the prompt and every token after it."""
        return self.prompt_ids + self.token_ids


def opened(prompt_ids: list[int]) -> EpisodeTokens:
    """An episode with its prompt and no turn yet."""
    return EpisodeTokens(list(prompt_ids), [], [], [])


def with_sampled(tokens: EpisodeTokens, sampled_ids: list[int], logprobs: list[float]) -> EpisodeTokens:
    """`tokens` followed by a model turn's sampled ids (as sampled) and their engine log-probs."""
    if len(sampled_ids) != len(logprobs):
        raise ValueError(f"{len(sampled_ids)} sampled ids but {len(logprobs)} log-probs")
    return EpisodeTokens(tokens.prompt_ids, tokens.token_ids + list(sampled_ids), tokens.loss_mask + [1] * len(sampled_ids),
                         tokens.logprobs + list(logprobs))


def with_environment(tokens: EpisodeTokens, environment_ids: list[int]) -> EpisodeTokens:
    """`tokens` followed by environment tokens (mask 0, log-prob 0.0)."""
    return EpisodeTokens(tokens.prompt_ids, tokens.token_ids + list(environment_ids),
                         tokens.loss_mask + [0] * len(environment_ids), tokens.logprobs + [0.0] * len(environment_ids))
