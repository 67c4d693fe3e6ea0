"""Model-graded rewards (docs/recipe.md section 9): a verifier model reads a problem and a
solution, writes an analysis naming the issues it found, and ends with a score of 0, 0.5 or 1.

Pure pieces only: the rubric texts (`texts`), the labels a triple may carry (`labels`), the parser
of an analysis (`parse`), the verifier's reward (`reward`), the check of an analysis against the
defect a synthetic triple holds (`meta`), the generator of those triples (`steps`,
`triples`), the analysis a perfect verifier writes of one (`analyses`, SFT data), and the
aggregation of n analyses into one score or label (`aggregate`: mean, scaled verification), and
a judge model's analyses made into a verdict with the programmatic statuses (`judged`; the
runner is training/judge/). The catalog task that trains a verifier on them is
curation/catalog/proof_grading.py.

This package sits outside curation/verifiers on purpose: that folder's source hash
(verifier_version) seeds every stored pass-rate shard, and registering a task must not move them.
"""
