"""RL's pure tensor functions, each tested against hand-computed numbers: group advantages, the clipped
objectives, KL by estimator and placement, mismatch corrections, entropy, covariance."""
