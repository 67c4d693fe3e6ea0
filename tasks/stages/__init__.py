"""A stage's life: its run (tracking, cache lookup, summary), its cache, its placement on a work pool."""
