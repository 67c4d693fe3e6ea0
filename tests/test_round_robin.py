"""Round-robin draws of distinct items: balanced refuses to run a cell dry, unbalanced lets it drop
out; the math suite and worked math on top of it."""

import itertools
import re

import pytest

from passband.curation.hygiene import question_key
from passband.curation.suites.math_suite import generate_math
from passband.curation.suites.round_robin import draw_round_robin
from passband.curation.worked_math import worked_math_rows


def _cycling(values: dict[str, list[str]]):
    """draw(cell): the cell's values in order, forever (so it repeats once it has given them all)."""
    streams = {cell: itertools.cycle(items) for cell, items in values.items()}
    return lambda cell: next(streams[cell])


def _message(cell, drawn):
    return f"{cell or 'everything'} ran out after {drawn}"


def test_unbalanced_lets_an_exhausted_cell_drop_out_by_hand():
    draw = _cycling({"a": ["a0", "a1", "a2"], "b": ["b0", "b1", "b2", "b3", "b4"]})
    picked = draw_round_robin(["a", "b"], draw, key=str, num=8, max_duplicate_draws=10,
                              exhausted_message=_message, balanced=False)
    assert [item for _, item in picked] == ["a0", "b0", "a1", "b1", "a2", "b2", "b3", "b4"]


def test_balanced_names_the_cell_that_ran_out_and_how_many_it_gave():
    draw = _cycling({"a": ["a0", "a1", "a2"], "b": ["b0", "b1", "b2", "b3", "b4"]})
    assert [item for _, item in draw_round_robin(["a", "b"], draw, str, 6, 10, _message)] == [
        "a0", "b0", "a1", "b1", "a2", "b2"]
    draw = _cycling({"a": ["a0", "a1", "a2"], "b": ["b0", "b1", "b2", "b3", "b4"]})
    with pytest.raises(ValueError, match="^a ran out after 3$"):
        draw_round_robin(["a", "b"], draw, str, 7, 10, _message)


def test_unbalanced_raises_with_the_total_when_every_cell_is_exhausted():
    draw = _cycling({"a": ["a0", "a1"], "b": ["b0", "b1", "b2"]})
    with pytest.raises(ValueError, match="^everything ran out after 5$"):
        draw_round_robin(["a", "b"], draw, str, 6, 10, _message, balanced=False)


def test_excluded_keys_are_never_drawn_and_count_as_repeats():
    draw = _cycling({"a": ["a0", "a1", "a2"], "b": ["b0", "b1"]})
    picked = draw_round_robin(["a", "b"], draw, str, 3, 10, _message, balanced=False,
                              excluded=lambda key: key in {"a1", "b0"})
    assert [item for _, item in picked] == ["a0", "b1", "a2"]


def test_unbalanced_math_fills_past_the_smallest_subdomain():
    # Difficulty-0 arithmetic is one-digit addition: exactly 100 distinct prompts (10 x 10 pairs).
    chosen = ["arithmetic", "combinatorics"]
    balanced_max = len(generate_math(64, 0, 0, chosen, "plain"))  # 32 each fits
    with pytest.raises(ValueError, match="combinatorics at difficulty 0 ran out .* after 32"):
        generate_math(66, 0, 0, chosen, "plain")
    rows = generate_math(132, 0, 0, chosen, "plain", balanced=False)
    assert rows[:balanced_max] == generate_math(64, 0, 0, chosen, "plain")
    assert [row["subdomain"] for row in rows[64:]] == ["arithmetic"] * 68
    pairs = {tuple(map(int, re.match(r"What is (\d) \+ (\d)\?", row["prompt"]).groups()))
             for row in rows if row["subdomain"] == "arithmetic"}
    assert pairs == set(itertools.product(range(10), repeat=2))
    assert len({row["prompt"] for row in rows}) == 132
    assert rows[100]["id"] == "math-arithmetic-d0-s0-100"
    with pytest.raises(ValueError, match=r"hold 132 distinct problems, fewer than the 133"):
        generate_math(133, 0, 0, chosen, "plain", balanced=False)


def test_unbalanced_worked_math_stays_outside_the_held_out_questions():
    held = generate_math(90, 0, 0, ["arithmetic"], "plain")  # 90 of the 100 sums held out
    exclude = frozenset(question_key(row["prompt"]) for row in held)
    with pytest.raises(ValueError, match="arithmetic at difficulty 0 ran out .* after 10 .* draw unbalanced"):
        worked_math_rows(30, 0, [0], ["arithmetic", "algebra"], "plain", exclude)
    rows, quarantined = worked_math_rows(30, 0, [0], ["arithmetic", "algebra"], "plain", exclude, balanced=False)
    assert quarantined == [] and len(rows) == 30
    sums = [row for row in rows if row["subdomain"] == "arithmetic"]
    assert len(sums) == 10 and not {question_key(row["prompt"]) for row in rows} & exclude
    assert [row["subdomain"] for row in rows[20:]] == ["algebra"] * 10
