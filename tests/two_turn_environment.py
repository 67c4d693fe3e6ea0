"""A user's environment that asks for a second turn on every episode, whatever the first says, and
grades the second as the answer: an episode of it always has exactly two model turns, so a run that
opened it shows num_turns = 2 x num_episodes, and one that did not shows no episodes at all."""

from __future__ import annotations

from dataclasses import dataclass, field

from passband.training.episodes.environment import Step

AGAIN = "Say it once more."


@dataclass
class AskTwiceEpisode:
    reference: str
    messages: list[dict[str, str]]
    tools: list = field(default_factory=list)
    turns: int = 0

    def step(self, text: str, final: bool) -> Step:
        self.turns += 1
        if self.turns == 1 and not final:
            return Step(done=False, observation=[{"role": "user", "content": AGAIN}])
        right = text.strip() == self.reference
        return Step(done=True, reward=float(right), status="pass" if right else "fail")


class AskTwice:
    def open(self, row: dict) -> AskTwiceEpisode:
        return AskTwiceEpisode(str(row["reference"]), [{"role": "user", "content": row["prompt"]}])
