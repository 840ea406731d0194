"""The typed records that flow through one training step."""
from dataclasses import dataclass, field

import torch

from rl.engine import dist


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
    group_ids: torch.Tensor        # Tensor[N] long on the CPU (row metadata, like scores), global prompt index
    completions: list              # N decoded final responses (the last turn's text)
    samples: list                  # N dataset rows (the prompt's sample repeated G times)
    turn_ids: torch.Tensor = None  # Tensor[N, R] long, turn index (from 0) of each model token, -1 elsewhere
    turn_scores: torch.Tensor = None  # Tensor[N, T] verifier score of each turn, NaN after the trajectory ended
    envs: list = None              # the N env instances of the episodes (their state at the end)
    conversations: list = None     # the N whole conversations as chat messages
    env_values: list = None        # N lists, one dict per turn: StepResult components and numeric info entries
    prompts: list = None           # N prompt texts given to reward functions
    scores: torch.Tensor = None    # Tensor[N] float, the scalar reward of each response (weighted components)
    correctness: torch.Tensor = None  # Tensor[N] float, the env verifier's score (success = full marks)
    components: dict = field(default_factory=dict)  # reward name -> Tensor[N] (NaN where a reward abstained)
    reward_raw: dict = field(default_factory=dict)  # the same before ppl / ent / pref are rank-normalised in groups
    policy_hidden: torch.Tensor = None  # Tensor[N, H] each response's final hidden state, when a policy reward ran
    old_logp: torch.Tensor = None  # Tensor[N, R] log-probs of the response tokens under the rollout policy
    ref_logp: torch.Tensor = None  # Tensor[N, R] same under the frozen reference (None when beta = 0)
    rollout_logp: torch.Tensor = None  # Tensor[N, R] the sampler's own log-probs (vLLM), 0 off the model's tokens;
    #                                    None with HF generate. Drives --vllm_is_correction.
    signals: object = None  # rl.rollout.sampling_signals.SamplingSignals the decode loop recorded (None: consumers do a forward)
    advantages: torch.Tensor = None  # Tensor[N] response-level or Tensor[N, T] turn-level advantage
    # A method's own per-response data, name -> Tensor[N, ...] (TCPO's "counterfactual" Tensor[N, T], MAESTRO's
    # "actions" Tensor[N]). Every rank must hold the same keys: gather() concatenates each in rank order.
    extras: dict = field(default_factory=dict)

    def gather(self) -> "GlobalBatch":
        """The batch-global view the advantages need: every rank's rows, in rank order (a collective: every rank
        calls it). Group and batch statistics over it are exact whatever the placement of groups on ranks.

        Every tensor of it is on the CPU, whatever device each came from: the rewards are computed there, the
        response lengths come from the GPU's mask, and the advantage maths mixes them (per-response scalars, under
        0.1% of a step). The trainer moves the advantages to the actor's device."""
        def gathered(t):
            return dist.all_gather_cat(t).cpu()

        return GlobalBatch(scores=gathered(self.scores), group_ids=gathered(self.group_ids),
                           lengths=gathered(self.response_mask.sum(-1)),
                           components={k: gathered(v) for k, v in self.components.items()},
                           correctness=gathered(self.correctness), turn_scores=gathered(self.turn_scores),
                           extras={k: gathered(self.extras[k]) for k in sorted(self.extras)})

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

    def truncated(self, eos_ids) -> torch.Tensor:
        """Tensor[N] bool: the rows with a model turn that ran out of --max_answer_seq_len (truncated_rows)."""
        return truncated_rows(self.turn_ids, self.response_ids, eos_ids)

    def __len__(self):
        return self.input_ids.shape[0]


@dataclass
class GlobalBatch:
    """Rollout.gather(): the tensors of every rank's rows that a method's advantages read (N = global rows)."""
    scores: torch.Tensor                 # Tensor[N] scalar reward per response
    group_ids: torch.Tensor              # Tensor[N] long
    lengths: torch.Tensor                # Tensor[N] number of response tokens
    components: dict = field(default_factory=dict)  # reward name -> Tensor[N], NaN = abstained (ordered)
    correctness: torch.Tensor = None     # Tensor[N] the env verifier's trajectory score
    turn_scores: torch.Tensor = None     # Tensor[N, T] verifier score per turn, NaN after a trajectory ended
    extras: dict = field(default_factory=dict)  # a method's own data, as Rollout.extras

    def component_matrix(self) -> torch.Tensor:
        """Tensor[N, K], columns in the order of `components`."""
        return torch.stack(list(self.components.values()), dim=1)


def truncated_rows(turn_ids: torch.Tensor, response_ids: torch.Tensor, eos_ids) -> torch.Tensor:
    """Tensor[N] bool: rows in which some model turn ended without an EOS token, i.e. ran out of --max_answer_seq_len
    (TRL's `is_truncated`; for multi-turn rows, credo's reading: a trajectory is truncated when any of its turns is).

    Args:
        turn_ids: Tensor[N, R] long, the turn index of each model token, -1 on feedback and padding (Rollout.turn_ids).
        response_ids: Tensor[N, R] long, the response part of the token ids (Rollout.response_ids).
        eos_ids: the ids that end a turn (Sampler.eos_ids).
    """
    turn_ids, response_ids = turn_ids.cpu(), response_ids.cpu()
    model = turn_ids >= 0
    following = torch.cat([turn_ids[:, 1:], torch.full_like(turn_ids[:, :1], -1)], dim=1)
    last_of_turn = model & (following != turn_ids)  # a turn's final token: the next token is another turn's or none
    ends_with_eos = torch.isin(response_ids, torch.tensor(sorted(eos_ids), dtype=response_ids.dtype))
    return (last_of_turn & ~ends_with_eos).any(dim=1)
