"""The one place the chat template is applied, for rollouts and for SFT alike.

Rollouts feed the engine `render_prompt(...)` and the model continues after it; SFT trains on
`encode_sft_example(...)`, whose prompt tokens are exactly the tokens of that same rendered string
(tokenized on its own), followed by the response tokens. Tokenizing prompt and response separately
(rather than the joined text) is deliberate: at rollout time the model generates *after* the
prompt's tokens, so a BPE merge across the prompt/response boundary would be a token sequence the
model never sees when sampling.
"""

from __future__ import annotations

from typing import Any

Messages = list[dict[str, str]]


def to_messages(prompt: str | Messages, system: str | None = None) -> Messages:
    """A user prompt (plain text or a list of {"role", "content"} messages) as chat messages.

    `system`, when given, becomes the first message; a prompt that already starts with a system
    message and a `system` argument together are refused (which one should win is not ours to guess).
    """
    if isinstance(prompt, str):
        messages: Messages = [{"role": "user", "content": prompt}]
    else:
        messages = [dict(m) for m in prompt]
        for i, message in enumerate(messages):
            if set(message) != {"role", "content"}:
                raise ValueError(f"message {i} must have exactly the keys role and content, got {sorted(message)}")
    if not messages:
        raise ValueError("prompt has no messages")
    if system is not None:
        if messages[0]["role"] == "system":
            raise ValueError("prompt already starts with a system message; do not also pass system=")
        messages = [{"role": "system", "content": system}, *messages]
    return messages


def render_prompt(tokenizer: Any, prompt: str | Messages, system: str | None = None) -> str:
    """The text the rollout engine is given: the chat template with the assistant turn opened.

    For SmolLM2 (ChatML): "<|im_start|>system\\n...<|im_end|>\\n<|im_start|>user\\n...<|im_end|>\\n
    <|im_start|>assistant\\n" (the template inserts its default system message when none is given).
    """
    return tokenizer.apply_chat_template(
        to_messages(prompt, system), add_generation_prompt=True, tokenize=False
    )


def encode_prompt(tokenizer: Any, prompt: str | Messages, system: str | None = None) -> list[int]:
    """Token ids of `render_prompt(...)`, without any extra BOS (the template already has its markers)."""
    return tokenizer(render_prompt(tokenizer, prompt, system), add_special_tokens=False)["input_ids"]


def encode_sft_example_unbounded(
    tokenizer: Any, prompt: str | Messages, response: str, system: str | None = None
) -> tuple[list[int], list[int]]:
    """(input_ids, loss_mask) of one prompt/response pair, with no length limit.

    loss_mask is 1 exactly on the response tokens and on the end-of-turn token that follows them
    (`tokenizer.eos_token_id`, "<|im_end|>" for SmolLM2), so the model learns to stop where the
    rollout engine stops; 0 on every prompt token. The "\\n" the template writes after <|im_end|>
    is not part of the example: generation ends at eos, so it is never sampled.
    """
    if tokenizer.eos_token_id is None:
        raise ValueError("tokenizer has no eos_token_id; the end-of-turn token cannot be trained")
    prompt_ids = encode_prompt(tokenizer, prompt, system)
    response_ids = tokenizer(response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return prompt_ids + response_ids, [0] * len(prompt_ids) + [1] * len(response_ids)


def encode_sft_example(
    tokenizer: Any,
    prompt: str | Messages,
    response: str,
    max_length: int,
    system: str | None = None,
) -> tuple[list[int], list[int]]:
    """(input_ids, loss_mask) as in `encode_sft_example_unbounded`, refusing examples over max_length.

    A too-long example is an error, not a silent truncation: a cut response teaches the model to
    stop mid-thought (and loses its end-of-turn token). Callers quarantine such rows instead.
    """
    input_ids, loss_mask = encode_sft_example_unbounded(tokenizer, prompt, response, system)
    if len(input_ids) > max_length:
        raise ValueError(f"example has {len(input_ids)} tokens, more than max_length={max_length}")
    return input_ids, loss_mask
