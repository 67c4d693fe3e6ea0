"""The base of curation's typed settings (hygiene, balance, pre-filter): they live beside the code
that consumes them, and the curate flow's config composes them."""

from pydantic import BaseModel, ConfigDict


class CurationConfig(BaseModel):
    """Unknown keys are refused (a typo fails when the config is read); field docstrings become
    descriptions (the Prefect UI and `passband config --schema` show them)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)
