"""Structured output: state a text's facts as a JSON object with given keys; fields checked."""

from passband.curation.bands import BandFilter
from passband.curation.catalog.task import EvalDefaults, Options, Task
from passband.curation.suites.structured_suite import generate_structured
from passband.curation.verifiers.json_fields import reference_error, verify_json
from passband.curation.verifiers.result import VerifyResult


class StructuredSettings(Options):
    """The JSON verifier has no settings: the object is found and compared one way."""


class StructuredSuiteOptions(Options):
    """The JSON suite has no options beyond (num_problems, seed, difficulty)."""


class StructuredTask(Task):
    name = "structured"
    Settings = StructuredSettings
    SuiteOptions = StructuredSuiteOptions
    # As math and code: drop only never-solved and mostly-solved prompts.
    default_band = BandFilter.parse("(0, 0.8]")
    eval_defaults = EvalDefaults(num_problems=16, difficulty=0, n=4, max_tokens=160)
    verifier = staticmethod(verify_json)

    def problems(self, num_problems: int, seed: int, difficulty: int | str,
                 options: StructuredSuiteOptions) -> list[dict]:
        return generate_structured(num_problems, seed, int(difficulty))

    def verify(self, completions: list[str], references: list, settings: StructuredSettings) -> list[VerifyResult]:
        return verify_json(completions, references)

    def reference_error(self, reference: object) -> str | None:
        return reference_error(reference)


STRUCTURED = StructuredTask()
