"""Supervised fine-tuning (DeepSpeed-Chat's step 1) on the RL actor's engine: sft.py's rooms."""
