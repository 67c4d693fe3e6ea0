"""The procedural structured-output suite: a short text states a few facts, the prompt asks for
them as a JSON object with named keys, the reference holds the expected value of each key.

Difficulty 0 asks for two keys of a one-sentence text, 1 for three, 2 for three from a text
that also states the same facts about a second entity (the model must pick the right one).
Row i comes from one seeded stream, so the first k rows of a larger request equal a request
for k rows.
"""

import random
from collections.abc import Callable
from dataclasses import dataclass

from passband.curation.suites.round_robin import draw_round_robin

MAX_DIFFICULTY = 2
# Consecutive duplicate prompts after which the request counts as too large for the pool.
MAX_DUPLICATE_DRAWS = 500

NAMES = ("Alice", "Bob", "Carla", "David", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas",
         "Kofi", "Lena", "Marco", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tara")
CITIES = ("Paris", "Lima", "Oslo", "Cairo", "Tokyo", "Austin", "Berlin", "Madrid", "Seoul",
          "Dublin", "Nairobi", "Toronto", "Lisbon", "Prague", "Denver")
PRODUCTS = ("lamp", "backpack", "kettle", "chair", "guitar", "bicycle", "jacket", "clock",
            "camera", "umbrella")
COLORS = ("red", "blue", "green", "black", "white", "yellow", "orange", "purple")
ANIMALS = ("cat", "dog", "rabbit", "parrot", "horse", "turtle", "hamster", "goat")


@dataclass(frozen=True)
class Kind:
    """A kind of entity: its keys in prompt order, how to draw values, how to state them."""

    keys: tuple[str, ...]
    draw: Callable[[random.Random], dict]
    sentence: Callable[[dict], str]


KINDS = {
    "person": Kind(
        keys=("name", "age", "city"),
        draw=lambda rng: {"name": rng.choice(NAMES), "age": rng.randint(18, 90), "city": rng.choice(CITIES)},
        sentence=lambda v: f"{v['name']} is {v['age']} years old and lives in {v['city']}.",
    ),
    "product": Kind(
        keys=("product", "price", "color"),
        draw=lambda rng: {"product": rng.choice(PRODUCTS), "price": rng.randint(5, 500),
                          "color": rng.choice(COLORS)},
        sentence=lambda v: f"The {v['color']} {v['product']} costs {v['price']} dollars.",
    ),
    "pet": Kind(
        keys=("name", "animal", "age"),
        draw=lambda rng: {"name": rng.choice(NAMES), "animal": rng.choice(ANIMALS), "age": rng.randint(1, 15)},
        sentence=lambda v: f"{v['name']} is a {v['age']} year old {v['animal']}.",
    ),
    "trip": Kind(
        keys=("origin", "destination", "days"),
        draw=lambda rng: dict(zip(("origin", "destination"), rng.sample(CITIES, 2)), days=rng.randint(2, 30)),
        sentence=lambda v: f"The trip from {v['origin']} to {v['destination']} took {v['days']} days.",
    ),
}


def render_prompt(keys: list[str], text: str) -> str:
    """The prompt: which keys, the text, and that only the JSON object is wanted."""
    quoted = [f'"{key}"' for key in keys]
    listed = " and ".join(quoted) if len(quoted) == 2 else ", ".join(quoted[:-1]) + f" and {quoted[-1]}"
    return f"Return a JSON object with the keys {listed} for this text: {text} Reply with only the JSON object."


def generate_structured(num_problems: int, seed: int, difficulty: int = 0) -> list[dict]:
    """`num_problems` rows with distinct prompts; reference {"fields": {key: value}}."""
    if num_problems < 0:
        raise ValueError(f"num_problems must be >= 0, got {num_problems}")
    if not 0 <= difficulty <= MAX_DIFFICULTY:
        raise ValueError(f"difficulty must be in 0..{MAX_DIFFICULTY}, got {difficulty}")
    rng = random.Random(f"structured:{difficulty}:{seed}")
    drawn = draw_round_robin(
        [difficulty], lambda _: _draw_problem(rng, difficulty), key=lambda problem: problem[1],
        num=num_problems, max_duplicate_draws=MAX_DUPLICATE_DRAWS,
        exhausted_message=lambda _, rows: f"ran out of distinct prompts after {rows} rows; ask for fewer")
    return [
        {
            "id": f"structured-{subdomain}-d{difficulty}-s{seed}-{index}",
            "task": "structured",
            "subdomain": subdomain,
            "prompt": prompt,
            "reference": {"fields": fields},
            "source": f"procedural-structured-d{difficulty}",
            "difficulty": difficulty,
        }
        for index, (_, (subdomain, prompt, fields)) in enumerate(drawn)
    ]


def _draw_problem(rng: random.Random, difficulty: int) -> tuple[str, str, dict]:
    """(subdomain, prompt, expected fields) for one problem."""
    subdomain = rng.choice(sorted(KINDS))
    kind = KINDS[subdomain]
    values = kind.draw(rng)
    keys = list(kind.keys) if difficulty >= 1 else rng.sample(kind.keys, 2)
    keys.sort(key=kind.keys.index)
    text = kind.sentence(values)
    if difficulty == 2:
        # A second entity of the same kind, differing in every key, stated after the first.
        while True:
            other = kind.draw(rng)
            if all(other[key] != values[key] for key in kind.keys):
                break
        text = f"{text} {kind.sentence(other)} Use the first one."
    return subdomain, render_prompt(keys, text), {key: values[key] for key in keys}
