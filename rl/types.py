"""The typed records that flow through one training step."""
from dataclasses import dataclass, field

import torch


@dataclass
class Rollout:
    """What one rollout phase on one rank produced: N = prompts x num_generations responses.

    Layout of each row of `input_ids`: [left-padded prompt | response, right-padded]. The response mask is 1 on
    the tokens the model generated (including its EOS), 0 on padding.
    """
    input_ids: torch.Tensor        # Tensor[N, P + R] long
    attention_mask: torch.Tensor   # Tensor[N, P + R] long
    response_mask: torch.Tensor    # Tensor[N, R] float
    prompt_len: int                # P, the padded prompt width
    group_ids: torch.Tensor        # Tensor[N] long, global prompt index: same id = same prompt
    completions: list              # N decoded response strings
    samples: list                  # N dataset rows (the prompt's sample repeated G times)
    prompts: list = None           # N prompt texts given to reward functions
    scores: torch.Tensor = None    # Tensor[N] float, the scalar reward of each response (weighted components)
    correctness: torch.Tensor = None  # Tensor[N] float, the env verifier's score (success = full marks)
    components: dict = field(default_factory=dict)  # reward name -> Tensor[N] (NaN where a reward abstained)
    old_logp: torch.Tensor = None  # Tensor[N, R] log-probs of the response tokens under the rollout policy
    ref_logp: torch.Tensor = None  # Tensor[N, R] same under the frozen reference (None when beta = 0)
    advantages: torch.Tensor = None  # Tensor[N] response-level advantage

    @property
    def response_ids(self) -> torch.Tensor:
        return self.input_ids[:, self.prompt_len:]

    def __len__(self):
        return self.input_ids.shape[0]
