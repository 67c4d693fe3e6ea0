"""A user's environment, as a package of the user's would ship it (imported by path in tests): the
model must say the reference; a wrong turn is answered with a hint, the third turn is graded."""

from __future__ import annotations

from dataclasses import dataclass, field

from passband.training.episodes.environment import Step

HINT = "Not yet. Say just the number."


@dataclass
class SayEpisode:
    reference: str
    messages: list[dict[str, str]]
    tools: list = field(default_factory=list)

    def step(self, text: str, final: bool) -> Step:
        if text.strip() == self.reference:
            return Step(done=True, reward=1.0, status="pass")
        if final:
            return Step(done=True, reward=0.0, status="fail")
        return Step(done=False, observation=[{"role": "user", "content": HINT}])


class SayTheAnswer:
    def open(self, row: dict) -> SayEpisode:
        return SayEpisode(str(row["reference"]), [{"role": "user", "content": row["prompt"]}])


NOT_AN_ENVIRONMENT = object()
