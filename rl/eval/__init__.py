"""Evaluation: eval.py's core (pass@k over episodes), validation during training, the pairwise judge."""
