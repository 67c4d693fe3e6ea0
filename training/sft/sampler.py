"""Deterministic data order for SFT whose whole state is (epoch, cursor).

Each epoch is a permutation of the examples seeded by (seed, epoch); a step takes the next examples
of that permutation while their real tokens fit in `batch_tokens`, and never crosses an epoch end
(the last step of an epoch may be smaller). Saving (epoch, cursor) after a step and restarting from
it yields exactly the remaining sequence of steps: nothing replayed, nothing skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SamplerState:
    """Position in the data stream: `cursor` examples of epoch `epoch`'s permutation are consumed."""

    epoch: int = 0
    cursor: int = 0


def epoch_permutation(num_examples: int, seed: int, epoch: int) -> list[int]:
    """The example order of one epoch; independent streams per (seed, epoch) via numpy's SeedSequence."""
    return np.random.default_rng([seed, epoch]).permutation(num_examples).tolist()


class StepSampler:
    """Yields the example indices of each optimizer step; see the module docstring."""

    def __init__(self, lengths: list[int], batch_tokens: int, seed: int, state: SamplerState = SamplerState()):
        if not lengths:
            raise ValueError("no examples to sample from")
        too_long = [i for i, n in enumerate(lengths) if n > batch_tokens]
        if too_long:
            raise ValueError(f"examples {too_long[:5]} are longer than batch_tokens={batch_tokens}")
        self.lengths = lengths
        self.batch_tokens = batch_tokens
        self.seed = seed
        self.state = state
        self._order = epoch_permutation(len(lengths), seed, state.epoch)

    def next_step(self) -> list[int]:
        """Indices of the next step's examples (at least one), advancing the state."""
        epoch, cursor = self.state.epoch, self.state.cursor
        indices: list[int] = []
        num_tokens = 0
        while cursor < len(self._order) and num_tokens + self.lengths[self._order[cursor]] <= self.batch_tokens:
            indices.append(self._order[cursor])
            num_tokens += self.lengths[self._order[cursor]]
            cursor += 1
        if cursor == len(self._order):
            epoch, cursor = epoch + 1, 0
            self._order = epoch_permutation(len(self.lengths), self.seed, epoch)
        self.state = SamplerState(epoch, cursor)
        return indices


def count_steps(lengths: list[int], batch_tokens: int, seed: int, num_epochs: int) -> int:
    """Optimizer steps in `num_epochs` epochs (depends on the permutations, so it is simulated)."""
    sampler = StepSampler(lengths, batch_tokens, seed)
    num_steps = 0
    while sampler.state.epoch < num_epochs:
        sampler.next_step()
        num_steps += 1
    return num_steps
