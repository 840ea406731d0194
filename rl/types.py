"""The typed records that flow through one training step."""
from dataclasses import dataclass, field

import torch


@dataclass
class Rollout:
    """What one rollout phase on one rank produced: N = prompts x num_generations trajectories.

    Layout of each row of `input_ids`: [left-padded prompt | model turn 1 | feedback 1 | model turn 2 | ... ,
    right-padded]. The response mask is 1 on the tokens the model generated (including its EOS), 0 on feedback
    and padding; `turn_ids` says which turn each model token belongs to.
    """
    input_ids: torch.Tensor        # Tensor[N, P + R] long
    attention_mask: torch.Tensor   # Tensor[N, P + R] long
    response_mask: torch.Tensor    # Tensor[N, R] float
    prompt_len: int                # P, the padded prompt width
    group_ids: torch.Tensor        # Tensor[N] long, global prompt index: same id = same prompt
    completions: list              # N decoded final responses (the last turn's text)
    samples: list                  # N dataset rows (the prompt's sample repeated G times)
    turn_ids: torch.Tensor = None  # Tensor[N, R] long, turn index (from 0) of each model token, -1 elsewhere
    turn_scores: torch.Tensor = None  # Tensor[N, T] verifier score of each turn, NaN after the trajectory ended
    envs: list = None              # the N env instances of the episodes (their state at the end)
    conversations: list = None     # the N whole conversations as chat messages
    env_values: list = None        # N lists, one dict per turn: StepResult components and numeric info entries
    counterfactual: torch.Tensor = None  # Tensor[N, T] TCPO fixed-history counterfactuals, NaN where none
    actions: torch.Tensor = None   # Tensor[N] long MAESTRO Conductor emphasis actions (None = equal weights)
    prompts: list = None           # N prompt texts given to reward functions
    scores: torch.Tensor = None    # Tensor[N] float, the scalar reward of each response (weighted components)
    correctness: torch.Tensor = None  # Tensor[N] float, the env verifier's score (success = full marks)
    components: dict = field(default_factory=dict)  # reward name -> Tensor[N] (NaN where a reward abstained)
    old_logp: torch.Tensor = None  # Tensor[N, R] log-probs of the response tokens under the rollout policy
    ref_logp: torch.Tensor = None  # Tensor[N, R] same under the frozen reference (None when beta = 0)
    rollout_logp: torch.Tensor = None  # Tensor[N, R] the sampler's own log-probs (vLLM), 0 off the model's tokens;
    #                                    None with HF generate. Drives --vllm_is_correction.
    advantages: torch.Tensor = None  # Tensor[N] response-level or Tensor[N, T] turn-level advantage

    def token_advantages(self, rows: slice) -> torch.Tensor:
        """Tensor[B, R]: each model token gets its response's (or its turn's) advantage; 0 elsewhere."""
        adv = self.advantages[rows]
        turn_ids = self.turn_ids[rows]
        if adv.dim() == 1:
            return adv[:, None].expand(turn_ids.shape) * (turn_ids >= 0)
        return adv.gather(1, turn_ids.clamp(min=0)) * (turn_ids >= 0)

    @property
    def response_ids(self) -> torch.Tensor:
        return self.input_ids[:, self.prompt_len:]

    def __len__(self):
        return self.input_ids.shape[0]
