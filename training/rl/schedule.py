"""When the RL loop evaluates, checkpoints and stops: the schedule, apart from the work.

As in torchtitan's trainer (`checkpointer.should_save(step)`, `evaluator.should_evaluate(step)`),
each decision is a question the loop asks the schedule, so the loop body reads as the recipe and
the rules are tested alone. Iterations are 1-based; iteration 0 is the state before training.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RLSchedule:
    num_iterations: int
    """The run's length: the last iteration is evaluated (when eval is on) and checkpointed."""
    eval_every: int | None
    """Evaluate every this many iterations; 0: only before the first and after the last; None: never."""
    checkpoint_every: int
    """Checkpoint every this many iterations (0: only where eval runs, the stop and the end)."""
    max_iterations_this_run: int | None = None
    """This process stops after this many iterations (a resumed run continues); None: run to the end."""

    def iterations(self, done: int) -> range:
        """The iterations this process runs after `done` were completed (by an earlier run too)."""
        return range(done + 1, self.stop_at(done) + 1)

    def stop_at(self, done: int) -> int:
        """The last iteration this process runs."""
        if self.max_iterations_this_run is None:
            return self.num_iterations
        return min(self.num_iterations, done + self.max_iterations_this_run)

    def should_evaluate_before(self, done: int) -> bool:
        """The held-out baseline, once, before any training."""
        return self.eval_every is not None and done == 0

    def should_evaluate(self, iteration: int) -> bool:
        if self.eval_every is None:
            return False
        return iteration == self.num_iterations or bool(self.eval_every and iteration % self.eval_every == 0)

    def is_last(self, iteration: int) -> bool:
        return iteration == self.num_iterations

    def should_save(self, iteration: int, done_before_run: int, stopped_early: bool) -> bool:
        """A checkpoint wherever eval ran (the best checkpoint must exist), at this process's last
        iteration (a rerun resumes from it), at an early stop, and every `checkpoint_every`."""
        return (self.should_evaluate(iteration) or iteration == self.stop_at(done_before_run) or stopped_early
                or bool(self.checkpoint_every and iteration % self.checkpoint_every == 0))
