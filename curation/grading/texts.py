"""The rubric a verifier grades by, the meta-rubric its analyses are graded by, and the prompts
built from them: written once, here (docs/recipe.md section 9 describes what they ask for).

Both end in two fixed phrases; the parser (curation/grading/parse.py) reads the score that
follows the second one, and a completion without them earns no reward (R_format).
"""

EVALUATION_PHRASE = "Here is my evaluation of the solution:"
"""Opens the verifier's analysis."""
SCORE_PHRASE = "Based on my evaluation, the final overall score should be:"
"""Followed by the verifier's score in \\boxed{}: 0, 0.5 or 1."""
REVIEW_PHRASE = "Here is my review of the evaluation:"
"""Opens the meta-verifier's review of an analysis."""
REVIEW_SCORE_PHRASE = "Based on my review, the score of the evaluation should be:"
"""Followed by the meta-verifier's grade of the analysis in \\boxed{}: 0, 0.5 or 1."""

ISSUE_FORMAT = "Issue in step K: <what is wrong>"
"""How an analysis names an issue, one per line; K is the solution's step number, which lets a
defect recorded on a synthetic triple be checked against the analysis (curation/grading/meta.py)."""

SCALE = """\
- 1: the solution is complete and rigorous. Every step is correct and justified, and the final
  answer is right. A result that is used without being proven does not earn 1.
- 0.5: the reasoning is sound and the final answer is right, but a step is left without its
  justification, or has a small slip that does not change the result.
- 0: a step is wrong, the final answer is wrong, or the solution does not solve the problem."""

RUBRIC = f"""\
You are grading a solution to a math problem. Read the problem, then check the solution step by
step. Write each issue you find on a line of its own as "{ISSUE_FORMAT}", where K is the number
of the step it concerns; if you find none, write "No issues found." Then give the solution one
overall score:
{SCALE}
Answer in exactly this form:
{EVALUATION_PHRASE}
<your issues, one per line>
{SCORE_PHRASE} \\boxed{{<0, 0.5 or 1>}}"""

META_RUBRIC = f"""\
You are checking an evaluation of a solution to a math problem. The evaluation was written by a
grader who was asked to list the solution's issues and to score it on this scale:
{SCALE}
Check three things. Does every issue the evaluation names really occur in the solution, at the
step it names? Is what it says about each issue accurate? Does its score follow from the issues
by the scale above? Grade the evaluation:
- 1: every issue it names is real and accurately described, it misses no issue that changes the
  score, and its score follows from them.
- 0.5: the issues it names are real, but one is described inaccurately or its score does not
  quite follow from them.
- 0: it names an issue that is not in the solution, misses an error that makes the solution wrong,
  or gives a score its issues contradict.
Answer in exactly this form:
{REVIEW_PHRASE}
<your review>
{REVIEW_SCORE_PHRASE} \\boxed{{<0, 0.5 or 1>}}"""


def grading_prompt(problem: str, solution: str) -> str:
    """The verifier's prompt: the rubric, the problem X and the solution Y."""
    return f"{GRADING_PROMPT_HEAD}{problem}\n\nSolution:\n{solution}"


GRADING_PROMPT_HEAD = f"{RUBRIC}\n\nProblem:\n"
"""How every grading prompt begins: `problem_of` reads X back from what follows."""


def problem_of(prompt: str) -> str | None:
    """The problem X of a prompt `grading_prompt` rendered, None for any other prompt.

    Decontamination compares a grading prompt by its X (curation/hygiene.py question_key): a
    triple that grades a worked solution of an eval question gives that question's answer away."""
    if not prompt.startswith(GRADING_PROMPT_HEAD):
        return None
    problem, separator, _ = prompt[len(GRADING_PROMPT_HEAD):].partition("\n\nSolution:\n")
    return problem if separator else None


def compared_text(prompt: str) -> str:
    """What duplicate and overlap checks compare of a prompt: a grading prompt's problem and
    solution, without the rubric every grading prompt shares (on its own it makes any two of them
    near duplicates, Jaccard 0.8-0.9 at 3-grams); any other prompt whole."""
    return prompt[len(GRADING_PROMPT_HEAD):] if problem_of(prompt) is not None else prompt


def meta_prompt(problem: str, solution: str, analysis: str) -> str:
    """The meta-verifier's prompt: the meta-rubric, X, Y and the verifier's analysis of Y."""
    return f"{META_RUBRIC}\n\nProblem:\n{problem}\n\nSolution:\n{solution}\n\nEvaluation:\n{analysis}"
