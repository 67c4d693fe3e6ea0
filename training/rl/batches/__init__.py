"""What one RL update trains on: which prompts (the cursor), with which weights (staleness), which groups
(dynamic sampling), and the fixed batch built from the engine's samples."""
