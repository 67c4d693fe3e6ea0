"""What an RL run watches about itself: per-task rollout metrics, the records of what the policy wrote,
drift alerts, and the timeline of what each role did when."""
