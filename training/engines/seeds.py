"""Per-request sampling seeds, shared by the engines: one seed per (call seed, prompt key)."""

from __future__ import annotations

import hashlib


def request_seed(seed: int, prompt_key: int | str) -> int:
    """A well-mixed 48-bit seed per (call seed, prompt): prompts of one call draw unrelated noise,
    and calls with neighbouring seeds do not share streams (vLLM adds 0..n-1 for the samples).
    `prompt_key` is the prompt's index in the call, or its content key when the caller gives one."""
    digest = hashlib.blake2b(f"{seed}:{prompt_key}".encode(), digest_size=6).digest()
    return int.from_bytes(digest, "little")
