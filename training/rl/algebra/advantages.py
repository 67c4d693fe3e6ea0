"""Group-relative advantages (GRPO, docs/recipe.md section 4) and the zero-variance group mask.

Rewards are `[B]` with groups contiguous: rows `g*G .. g*G+G-1` are the G rollouts of prompt g.

Choices, stated once:
- The std is the SAMPLE std (Bessel-corrected, divide by n-1), as `torch.std` computes it and as
  TRL's GRPO trainer uses it. A group with fewer than two valid members has std 0 by definition
  here (the sample std is undefined), so its advantages are 0.
- `valid` (0/1 `[B]`, optional) marks rollouts whose output could be parsed. Invalid rollouts are
  left out of their group's mean and std and get advantage 0: they carry no signal, and giving
  them one would teach the wrong thing (docs/recipe.md section 4, Rewards). Their reward value is never
  read, so it may be NaN. The caller also zeroes their loss mask, so they leave the gradient.
"""

import torch
from torch import Tensor


def _grouped(rewards: Tensor, group_size: int, valid: Tensor | None) -> tuple[Tensor, Tensor]:
    """Reshape to `[num_groups, G]`: rewards with invalid entries set to 0, and the 0/1 valid mask."""
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [B], got shape {tuple(rewards.shape)}")
    if group_size < 1 or rewards.numel() % group_size != 0:
        raise ValueError(
            f"batch of {rewards.numel()} rewards is not a whole number of groups of group_size={group_size}"
        )
    if valid is None:
        valid = torch.ones_like(rewards, dtype=torch.bool)
    valid = valid.to(torch.bool).reshape(-1, group_size)
    rewards = rewards.to(torch.float32).reshape(-1, group_size)
    # where() rather than multiply: an invalid reward may be NaN and NaN * 0 is NaN.
    return torch.where(valid, rewards, torch.zeros_like(rewards)), valid.to(torch.float32)


def _group_mean_std(rewards: Tensor, valid: Tensor) -> tuple[Tensor, Tensor]:
    """Per-group mean and sample std over valid members, each `[num_groups, 1]`."""
    num_valid = valid.sum(dim=1, keepdim=True)  # [num_groups, 1]
    mean = rewards.sum(dim=1, keepdim=True) / num_valid.clamp(min=1)
    squared = ((rewards - mean) ** 2) * valid
    # Bessel correction; groups with < 2 valid members get variance 0 (clamp avoids 0/0).
    variance = squared.sum(dim=1, keepdim=True) / (num_valid - 1).clamp(min=1)
    return mean, variance.sqrt()


def group_advantages(
    rewards: Tensor,
    group_size: int,
    scale_by_std: bool = True,
    eps: float = 1e-6,
    valid: Tensor | None = None,
) -> Tensor:
    """A_i = (r_i - mean(group)) / (std(group) + eps), or r_i - mean(group) if not scale_by_std.

    rewards: `[B]`; valid: optional 0/1 `[B]` (see module docstring). Returns float32 `[B]`,
    0 for invalid rows.
    """
    grouped, valid_mask = _grouped(rewards, group_size, valid)
    mean, std = _group_mean_std(grouped, valid_mask)
    advantages = grouped - mean
    if scale_by_std:
        advantages = advantages / (std + eps)
    # Equal rewards must give exactly 0: rounding in the mean (e.g. three rewards of 0.1) leaves
    # deviations of ~1e-9 that the division by (std + eps) would blow up to ~1e-3.
    informative = ~_equal_within_group(grouped, valid_mask)  # [num_groups]
    return (advantages * valid_mask * informative[:, None]).reshape(-1)


def _equal_within_group(grouped: Tensor, valid_mask: Tensor) -> Tensor:
    """Bool `[num_groups]`: all valid rewards equal, or fewer than two valid members."""
    is_valid = valid_mask.bool()
    highest = torch.where(is_valid, grouped, torch.full_like(grouped, -torch.inf)).amax(dim=1)
    lowest = torch.where(is_valid, grouped, torch.full_like(grouped, torch.inf)).amin(dim=1)
    return (valid_mask.sum(dim=1) < 2) | (highest == lowest)


def zero_variance_groups(rewards: Tensor, group_size: int, valid: Tensor | None = None) -> Tensor:
    """Bool `[num_groups]`: True where the group's valid rewards are all equal (or < 2 are valid).

    Such groups have all-zero advantages and contribute no gradient; the flow counts them and
    may drop them before the update.
    """
    grouped, valid_mask = _grouped(rewards, group_size, valid)
    # Compare max and min rather than test std == 0: rounding in the mean can leave a tiny
    # non-zero std for equal rewards such as 0.1.
    return _equal_within_group(grouped, valid_mask)
