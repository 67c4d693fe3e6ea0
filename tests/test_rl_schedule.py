"""When the RL loop evaluates and checkpoints (training/rl/schedule.py), against tables worked by hand."""

from __future__ import annotations

from passband.training.rl.schedule import RLSchedule


def _due(schedule: RLSchedule, done: int = 0, stop_at: int | None = None) -> tuple[list[int], list[int]]:
    iterations = list(schedule.iterations(done))
    return ([i for i in iterations if schedule.should_evaluate(i)],
            [i for i in iterations if schedule.should_save(i, done, stopped_early=i == stop_at)])


def test_eval_every_4_of_10_checkpoint_every_3():
    schedule = RLSchedule(num_iterations=10, eval_every=4, checkpoint_every=3)
    # eval: 4, 8 and the last; checkpoints: where eval ran, every 3rd, the last
    assert _due(schedule) == ([4, 8, 10], [3, 4, 6, 8, 9, 10])
    assert schedule.should_evaluate_before(0) and not schedule.should_evaluate_before(3)
    assert schedule.is_last(10) and not schedule.is_last(9)


def test_eval_only_before_and_after_and_checkpoints_only_at_the_end():
    assert _due(RLSchedule(num_iterations=5, eval_every=0, checkpoint_every=0)) == ([5], [5])


def test_no_eval_at_all():
    schedule = RLSchedule(num_iterations=4, eval_every=None, checkpoint_every=0)
    assert _due(schedule) == ([], [4])
    assert not schedule.should_evaluate_before(0)


def test_a_bounded_run_stops_and_checkpoints_where_it_stops_and_a_rerun_continues():
    schedule = RLSchedule(num_iterations=10, eval_every=5, checkpoint_every=0, max_iterations_this_run=3)
    assert list(schedule.iterations(0)) == [1, 2, 3]
    assert _due(schedule, done=0) == ([], [3])
    assert list(schedule.iterations(3)) == [4, 5, 6]
    assert _due(schedule, done=3) == ([5], [5, 6])
    assert list(schedule.iterations(9)) == [10]
    assert list(schedule.iterations(10)) == []


def test_an_early_stop_checkpoints_its_iteration():
    schedule = RLSchedule(num_iterations=10, eval_every=0, checkpoint_every=0)
    assert _due(schedule, stop_at=6) == ([10], [6, 10])
