"""The trainer's weights as the engine takes them: cast to the engine's dtype one tensor at a
time (`engine_dtype.py`) and published by version, manifest last (`versions.py`). The in-process
RL sync and rollout workers in other processes load the same published versions."""
