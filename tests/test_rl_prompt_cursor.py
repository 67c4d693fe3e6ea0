"""The RL prompt cursor: weighted mixing by hand-computed slots, epochs without replacement, and
a draw split in two (as a resumed run does) equal to the same draw in one go."""

import pytest

from passband.training.rl.batches.prompt_cursor import allocate_slots, draw_prompts, epoch_order


def test_equal_weights_round_robin_by_hand():
    # Deficits w*total - count, ties to the first name: a, b, c, a, b, c, a, b.
    assert allocate_slots({"a": 1, "b": 1, "c": 1}, {"a": 0, "b": 0, "c": 0}, 8) == list("abcabcab")
    # Next iteration: c is one behind (3, 3, 2 drawn of 8), so it goes first.
    assert allocate_slots({"a": 1, "b": 1, "c": 1}, {"a": 3, "b": 3, "c": 2}, 3) == list("cab")


def test_unequal_weights_by_hand():
    # shares .75/.25: total 1: a .75 vs b .25 -> a; total 2: a 1.5-1=.5 vs b .5 -> tie, a;
    # total 3: a 2.25-2=.25 vs b .75 -> b; total 4: a 3-2=1 vs b 1-1=0 -> a.
    assert allocate_slots({"a": 3.0, "b": 1.0}, {"a": 0, "b": 0}, 4) == list("aaba")


def test_long_run_shares_match_weights():
    slots = allocate_slots({"math": 2, "code": 1, "ifeval": 1}, {"math": 0, "code": 0, "ifeval": 0}, 400)
    assert (slots.count("math"), slots.count("code"), slots.count("ifeval")) == (200, 100, 100)


def test_epochs_visit_every_row_once_before_repeating():
    picks, counts = draw_prompts({"a": 3}, {"a": 1.0}, {"a": 0}, 7, seed=5)
    rows = [index for _, index in picks]
    assert sorted(rows[:3]) == [0, 1, 2] and sorted(rows[3:6]) == [0, 1, 2]
    assert rows[:3] == epoch_order(3, 5, "a", 0) and rows[3:6] == epoch_order(3, 5, "a", 1)
    assert rows[6] == epoch_order(3, 5, "a", 2)[0]
    assert counts == {"a": 7}


def test_split_draw_equals_one_draw():
    num_rows, weights = {"math": 5, "code": 3}, {"math": 1.0, "code": 1.0}
    whole, whole_counts = draw_prompts(num_rows, weights, {"math": 0, "code": 0}, 9, seed=1)
    first, counts = draw_prompts(num_rows, weights, {"math": 0, "code": 0}, 4, seed=1)
    second, split_counts = draw_prompts(num_rows, weights, counts, 5, seed=1)
    assert first + second == whole
    assert split_counts == whole_counts == {"math": 4, "code": 5}  # ties go to "code" (sorts first)


def test_seed_changes_the_order():
    assert epoch_order(20, 0, "math", 0) != epoch_order(20, 1, "math", 0)


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="positive"):
        allocate_slots({"a": 0.0}, {"a": 0}, 1)
    with pytest.raises(ValueError, match="no count for task"):
        allocate_slots({"a": 1.0, "b": 1.0}, {"a": 0}, 1)
    with pytest.raises(ValueError, match="no rows"):
        draw_prompts({"a": 0}, {"a": 1.0}, {"a": 0}, 1, seed=0)
