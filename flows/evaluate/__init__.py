"""The `evaluate` flow (flow.py) and the one eval config the sft and rl flows compose too (config.py)."""
