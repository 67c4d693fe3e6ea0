"""RL's rollouts below the flow: one iteration's scored rollouts (`collect.py: collect_rollouts`), the
thread that collects them ahead of the trainer with the engine it shares by weight version (`ahead.py:
RolloutsAhead, VersionedEngine`), and the settings both read (`settings.py: RolloutSettings`, which
the RL flow builds from its config: nothing here imports flows/)."""
