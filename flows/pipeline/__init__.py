"""The `pipeline` flow (flow.py) and its `@stage.output` references (refs.py)."""
