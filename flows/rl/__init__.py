"""The `rl` flow (flow.py), its config, the loop's parts, one iteration's rollouts and the rollouts ahead."""
