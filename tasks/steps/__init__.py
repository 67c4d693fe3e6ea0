"""The pipeline's steps as thin Prefect tasks over the pure logic: problems, evaluation, rollouts, SFT, RL."""
