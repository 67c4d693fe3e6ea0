"""The trainers' runtime, shared by SFT and RL (and the judge): device, precision, the process group
and FSDP2 sharding, sharded checkpoints, meta-device init, LR schedules, and the chunked LM head both
compute log-probs with. Neither trainer imports the other (pyproject.toml's import-linter contracts)."""
