"""Rollout: the prompt stream and data files, the multi-turn episode driver, samplers and the decode loop, DAPO's dynamic sampling, the vLLM backend."""
