"""Meta-verification without a model, for synthetic triples: the injected defect is the ground truth
for "do the issues the analysis names exist" (docs/recipe.md section 9).

An analysis names issues by step ("Issue in step K: ..."). Against the defect's step k (None for a
complete solution) it is graded on the meta-rubric's scale:
- 1: it names exactly the defective step (or nothing, for a complete solution);
- 0.5: it names the defective step and others besides (found the issue, invented more);
- 0: it misses the defective step, or names issues in a complete solution.
"""

from passband.curation.grading.parse import issue_steps


def defect_check(analysis: str, defect_step: int | None) -> float:
    """The analysis's grade, 0, 0.5 or 1, against the step the defect was injected at."""
    named = set(issue_steps(analysis))
    if defect_step is None:
        return 0.0 if named else 1.0
    if defect_step not in named:
        return 0.0
    return 1.0 if named == {defect_step} else 0.5


def invented_issues(analysis: str, defect_step: int | None) -> list[int]:
    """Steps the analysis names that hold no injected defect: the issues a meta-check catches."""
    return [step for step in issue_steps(analysis) if step != defect_step]
