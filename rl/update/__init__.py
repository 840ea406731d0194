"""The update: log-probs, micro-batching, policy losses and corrections, the PPO step, the non-finite step guard, length shaping."""
