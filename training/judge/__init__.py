"""A model as a task's reward (docs/recipe.md section 9): a judge reads the task's prompt and a
rollout, writes analyses by the rubric (curation/grading/texts.py) and scores it; its settings
(`config`), the runner on its own engine (`judge`), and the scoring of mixed rows where some
tasks are judged and the rest verified by their programs (`score`)."""
