"""Which KL estimators, placements and levels exist and which pairs are allowed (docs/recipe.md section 6).

Torch-free, so validating an RL config does not load torch; why each pair is refused or warned
about is said in `training/rl/algebra/kl.py`'s docstring.
"""

import warnings

KL_ESTIMATORS = ("k1", "k2", "k3", "huber")
KL_PLACEMENTS = ("reward", "loss")
KL_LEVELS = ("token", "sequence")
RENAMED_ESTIMATORS = {"mse": "huber"}


def refuse_renamed_estimator(estimator: str) -> None:
    """ValueError naming the new name for an estimator that was renamed (`mse` -> `huber`)."""
    if estimator in RENAMED_ESTIMATORS:
        raise ValueError(
            f"KL estimator {estimator!r} was renamed {RENAMED_ESTIMATORS[estimator]!r}: it is a Huber loss on the "
            "log-ratio (k2 with its gradient coefficient clamped to [-1, 1]), not a probability-space MSE"
        )


def check_kl_placement(placement: str, estimator: str) -> None:
    """Refuse the unprincipled pairs with a ValueError saying why; warn on k3 as a loss.

    Call it when a config is built, so a bad setting fails before any rollout.
    """
    refuse_renamed_estimator(estimator)
    if placement == "reward":
        if estimator != "k1":
            raise ValueError(
                f"KL in the reward must use estimator 'k1' (got {estimator!r}): the score-function "
                "gradient of k1 is the reverse-KL gradient; use placement='loss' for k2/k3/huber"
            )
        return
    if placement != "loss":
        raise ValueError(f"unknown KL placement {placement!r}; expected one of {KL_PLACEMENTS}")
    if estimator == "k1":
        raise ValueError(
            "KL estimator 'k1' as a loss has zero expected gradient (E[grad log pi] = 0), so it "
            "regularizes nothing and only adds noise; use 'k2' as a loss or 'k1' in the reward"
        )
    if estimator == "k3":
        warnings.warn(
            "KL estimator 'k3' as a loss follows the gradient of the forward KL(pi_ref || pi): weak "
            "when pi >> pi_ref and explosive when pi << pi_ref; 'k2' gives the reverse-KL gradient",
            stacklevel=2,
        )
    elif estimator not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {estimator!r}; expected one of {KL_ESTIMATORS}")
