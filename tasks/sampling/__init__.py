"""Sharded sampling (pass rates, evaluation) in the flow or on Prefect task workers, and the worker process."""
