"""The engine: the DeepSpeed actor and reference, ZeRO config, LoRA, the hardware probe, collectives, model loading."""
