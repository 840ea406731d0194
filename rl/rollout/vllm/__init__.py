"""The vLLM rollout backend (--rollout_backend vllm): the colocated engine, its CPU build's setup, the repacked CPU weights."""
