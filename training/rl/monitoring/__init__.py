"""What an RL run watches about itself: per-task rollout metrics, the records of what the policy wrote,
drift alerts, the entropy ceiling's fit (and its early stop), and the timeline of what each role did when."""
