"""Many analyses of one solution, made into one score (docs/recipe.md section 9): the plain mean,
or the recipe's scaled verification, whose labels need k of n analyses to agree.

Pure: the analyses and their meta-reviews are sampled elsewhere (a judge engine, issue 31 item 3);
here they arrive as parsed scores, None where an output was unparsable (it counts for nothing,
never as a 0).
"""

from collections import Counter


def mean_score(scores: list[float | None]) -> float | None:
    """The mean of the parsed scores; None when none parsed."""
    parsed = [score for score in scores if score is not None]
    return sum(parsed) / len(parsed) if parsed else None


def confirmed(grades: list[float | None]) -> bool:
    """An analysis's issues are confirmed when most of its parsed meta-grades are at least 0.5:
    the meta-rubric gives 0 exactly to an analysis naming an issue that is not there."""
    parsed = [grade for grade in grades if grade is not None]
    return sum(grade >= 0.5 for grade in parsed) * 2 > len(parsed)


def scaled_label(scores: list[float | None], reviews: list[list[float | None]], k: int) -> float | None:
    """The label of a solution from n analyses (`scores`) and the meta-grades of each (`reviews[i]`,
    read only where scores[i] < 1): the lowest score that at least `k` analyses with confirmed
    issues give; 1 when no analysis has confirmed issues and at least `k` gave 1; None otherwise
    (no agreement: drop the solution, or send it to a person)."""
    if len(scores) != len(reviews):
        raise ValueError(f"{len(scores)} analyses but {len(reviews)} lists of meta-grades; need one per analysis")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    low = Counter(score for score, grades in zip(scores, reviews)
                  if score is not None and score < 1 and confirmed(grades))
    if low:
        lowest = min(low)
        return lowest if low[lowest] >= k else None
    return 1.0 if scores.count(1.0) >= k else None
