"""Batch invariance: whether a prompt's samples depend on which other requests shared its engine steps.

Each prompt is keyed (its seed follows the key, not its place in a call: seeds.py), so any
difference between a prompt sampled with the whole call, in a smaller call or beside other prompts
comes from the logits, that is from how the engine's kernels reduced a batch of another shape.
Compared bit for bit: the tokens first, then the log-probs of equal tokens (a last-bit logit
difference shows there long before it flips a sampled token).
"""

from __future__ import annotations

from dataclasses import dataclass

from passband.training.engines.config import SamplingConfig
from passband.training.engines.protocol import RolloutEngine, Sample


TOPICS = ("a lighthouse", "the number seven", "a lost key", "rain in the desert", "a robot chef", "an old map",
          "a talking cat", "the last train", "a paper boat", "a quiet library", "a broken clock", "the first snow")


def probe_questions(count: int, offset: int = 0) -> list[str]:
    """`count` distinct story requests (long, open answers: many sampled tokens near a tie), numbered
    from `offset` so two sets do not share a prompt."""
    return [f"Tell me a short story about {TOPICS[(offset + i) % len(TOPICS)]} ({offset + i})." for i in range(count)]


@dataclass(frozen=True)
class Difference:
    """Where two samplings of the same keyed prompt first part."""

    key: str
    sample_index: int
    position: int
    """Generated-token index of the first difference."""
    kind: str
    """'token' (another token sampled there) or 'logprob' (same tokens, another log-prob's bits)."""
    first: float
    """The reference's token id or log-prob at `position`."""
    second: float
    """The other sampling's token id or log-prob at `position`."""
    num_samples_differing: int
    """Samples whose tokens differ anywhere (0 when only log-probs do)."""


def keyed_samples(engine: RolloutEngine, prompts: list[str], keys: list[str],
                  sampling: SamplingConfig) -> dict[str, list[Sample]]:
    """{key: the prompt's samples} of one generate call."""
    return dict(zip(keys, engine.generate(prompts, sampling, prompt_keys=keys), strict=True))


def first_difference(reference: dict[str, list[Sample]], other: dict[str, list[Sample]]) -> Difference | None:
    """The first token difference over `reference`'s keys (in order), else the first log-prob one; None
    when every sample of every key is the same bit for bit."""
    pairs = [(key, a, b) for key in reference for a, b in zip(reference[key], other[key], strict=True)]
    num_differing = sum(a.token_ids != b.token_ids for _, a, b in pairs)
    for kind in ("token", "logprob"):
        for key, a, b in pairs:
            first, second = (a.token_ids, b.token_ids) if kind == "token" else (a.logprobs, b.logprobs)
            length = min(len(first), len(second))
            position = next((i for i in range(length) if first[i] != second[i]), length)
            if position < length or len(first) != len(second):
                return Difference(key, a.sample_index, position, kind,
                                  first[position] if position < len(first) else -1,
                                  second[position] if position < len(second) else -1, num_differing)
    return None


def batch_invariance(engine: RolloutEngine, prompts: list[str], others: list[str], sampling: SamplingConfig
                     ) -> tuple[dict[str, list[Sample]], dict[str, Difference | None]]:
    """The prompts sampled in one call (keyed `p0`, `p1`, ...), and how that compares with: the same
    call again (`again`), the prompts cut into two calls (`split`) and the prompts interleaved with
    `others` in one call (`mixed`)."""
    keys = [f"p{i}" for i in range(len(prompts))]
    other_keys = [f"other{i}" for i in range(len(others))]
    together = keyed_samples(engine, prompts, keys, sampling)
    again = keyed_samples(engine, prompts, keys, sampling)
    half = len(prompts) // 2
    split = {**keyed_samples(engine, prompts[:half], keys[:half], sampling),
             **keyed_samples(engine, prompts[half:], keys[half:], sampling)}
    mixed_prompts = [p for pair in zip(others, prompts) for p in pair] + prompts[len(others):]
    mixed_keys = [k for pair in zip(other_keys, keys) for k in pair] + keys[len(others):]
    mixed = keyed_samples(engine, mixed_prompts, mixed_keys, sampling)
    return together, {"again": first_difference(together, again), "split": first_difference(together, split),
                      "mixed": first_difference(together, mixed)}
