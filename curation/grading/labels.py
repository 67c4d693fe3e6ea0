"""What a grading triple's label holds: the score s, and for synthetic triples the defect that was
injected into the solution and the step it sits at.

A reference is `{"score": s}` (user-labelled triples) or `{"score": s, "defect": kind,
"defect_step": k}` (curation/grading/triples.py); k is the 1-based step number the solution shows,
None for a complete solution.
"""

from typing import Literal

SCORES = (0.0, 0.5, 1.0)
"""The scores a verifier gives and a label holds (docs/recipe.md section 9)."""

DefectKind = Literal["complete", "unjustified_step", "minor_slip", "wrong_step", "wrong_result"]
DEFECT_SCORES: dict[str, float] = {
    "complete": 1.0,  # every step shown and justified, the answer right
    "unjustified_step": 0.5,  # one step states its value without the computation or the reason
    "minor_slip": 0.5,  # one step miswrites a number of its computation; its value stays right
    "wrong_step": 0.0,  # one step computes a wrong value, which carries into the answer
    "wrong_result": 0.0,  # every step right, the final answer stated wrong
}
"""Each defect kind and the score it earns a solution."""
REFERENCE_KEYS = ("score", "defect", "defect_step")


def reference_error(reference: object) -> str | None:
    """Why `reference` cannot label a grading triple, or None."""
    if not isinstance(reference, dict):
        return f"proof_grading reference must be an object {{'score': 0, 0.5 or 1}}, got {type(reference).__name__}"
    unknown = sorted(set(reference) - set(REFERENCE_KEYS))
    if unknown:
        return f"proof_grading reference has unknown keys {unknown}; it takes {list(REFERENCE_KEYS)}"
    if "score" not in reference:
        return "proof_grading reference needs 'score' (0, 0.5 or 1)"
    score = reference["score"]
    if isinstance(score, bool) or not isinstance(score, int | float):
        return f"proof_grading reference 'score' must be the number 0, 0.5 or 1, got {score!r:.40} ({type(score).__name__})"
    if score not in SCORES:
        return f"proof_grading reference 'score' must be 0, 0.5 or 1, got {score!r}"
    if "defect" not in reference:
        return None
    defect, step = reference["defect"], reference.get("defect_step")
    if defect not in DEFECT_SCORES:
        return f"proof_grading reference 'defect' must be one of {list(DEFECT_SCORES)}, got {defect!r:.40}"
    if DEFECT_SCORES[defect] != score:
        return f"proof_grading reference: defect {defect!r} scores {DEFECT_SCORES[defect]}, not {score}"
    if defect == "complete":
        return None if step is None else f"proof_grading reference: a complete solution has no 'defect_step', got {step!r}"
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        return f"proof_grading reference 'defect_step' must be a step number >= 1 for defect {defect!r}, got {step!r}"
    return None
