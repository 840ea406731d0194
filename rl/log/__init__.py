"""Logging: step metrics, their backends (console, JSONL, TensorBoard, wandb), completions, env and refinement metrics."""
