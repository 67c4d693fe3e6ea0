"""The `curate` flow (flow.py), its config, and its SFT half (sft.py)."""
