"""credo: verifier-guided RL for LLMs on one DeepSpeed ZeRO-3 actor."""
import os

# the checkout this package runs from: .cache/ (models, hardware probe, torch extensions) and saved configs live here
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
