"""credo: verifier-guided RL for LLMs on one DeepSpeed ZeRO-3 actor."""
