"""Bounded staleness: which weights each iteration's rollouts are sampled with (docs/recipe.md section 5).

Versions count updates: v0 is the run's start weights, v<i> the weights after iteration i's update
(training/weights/versions.py publishes them). The synchronous loop samples iteration i with
v<i-1>, the weights it then trains from. With `max_off_policy_steps` k >= 1 the rollouts of
iteration i are sampled while iteration i-1 (and, for k >= 2, earlier ones) still train, with
v<i-1-k>: a fixed lag, as verl's one-step-off pipeline, rather than "whatever is newest", so a run
is reproducible from its seeds however fast each side happens to be. A run resumed after
iteration r holds v<r> only. Its checkpoint kept the rollouts of iterations r+1..r+k, sampled
before the stop (RLState.in_flight), and iteration r+k+1 samples with v<r> = v<(r+k+1) - 1 - k>:
the resumed run trains on what the uninterrupted one trained on. A checkpoint without them (one
written before they were kept) samples its next iterations with v<r> until the lag catches up:
fresher than the uninterrupted run, never staler, with the same prompts.

The trainer recomputes pi_old at its current weights before the first inner step
(`algo.behaviour_policy: trainer`): the clipped ratio is taken against the weights being trained
(decoupled PPO), and the mismatch correction's rho = pi_trainer / pi_engine sees the whole gap,
staleness and engine numerics together.
"""

from __future__ import annotations


def behaviour_version(iteration: int, max_off_policy_steps: int, resumed_at: int) -> int:
    """The weights version iteration `iteration` (1-based) is sampled with: v<iteration - 1 - k>,
    never older than v<resumed_at>, the weights this process started from."""
    if iteration <= resumed_at:
        raise ValueError(f"iteration {iteration} was completed before this run resumed at {resumed_at}")
    return max(iteration - 1 - max_off_policy_steps, resumed_at)


def off_policy_steps(iteration: int, sampled_version: int) -> int:
    """Updates between the weights a batch was sampled with and the weights it trains: 0 on policy."""
    return iteration - 1 - sampled_version


def check_staleness(iteration: int, sampled_version: int, max_off_policy_steps: int) -> None:
    """Refuse a batch sampled more than `max_off_policy_steps` updates ago, or with weights the
    trainer has not published yet. The schedule above never makes one; an engine that held other
    weights than it was asked to load would, and training on it would break the bound silently."""
    steps = off_policy_steps(iteration, sampled_version)
    if not 0 <= steps <= max_off_policy_steps:
        raise RuntimeError(f"iteration {iteration}'s rollouts were sampled with weights v{sampled_version}: "
                           f"{steps} updates off policy, outside [0, max_off_policy_steps={max_off_policy_steps}]")


def versions_to_keep(max_off_policy_steps: int) -> int:
    """Published versions a run keeps: the newest and the k before it, the oldest of which the
    rollouts in flight may still be loading when the newest is published."""
    return max_off_policy_steps + 1


def check_token_staleness(iteration: int, row_id: str, token_versions: list[int], max_lag: int) -> None:
    """The per-token bound of partial rollouts (training/rl/batches/partial.py): refuse an answer one of
    whose tokens was sampled more than `max_lag` updates before the weights iteration `iteration` trains
    from, or by weights not published yet."""
    lags = [off_policy_steps(iteration, version) for version in token_versions]
    if lags and not (0 <= min(lags) and max(lags) <= max_lag):
        raise RuntimeError(f"iteration {iteration}: an answer to {row_id} holds tokens {max(lags)} updates off "
                           f"policy (versions {sorted(set(token_versions))}), outside [0, max_carries={max_lag}]")
