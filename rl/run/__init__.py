"""A run's life: its start (output folder, resume choice, saved config), checkpoints and their manifest, the best checkpoint, the launcher's ranks."""
