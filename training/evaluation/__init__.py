"""Evaluation logic: pass@k estimation (docs/recipe.md section 8)."""

from passband.training.evaluation.pass_at_k import mean_pass_at_k, pass_at_k, pass_at_k_curve

__all__ = ["mean_pass_at_k", "pass_at_k", "pass_at_k_curve"]
