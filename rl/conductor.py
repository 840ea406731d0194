"""MAESTRO's Conductor: a small policy over reward-emphasis actions, conditioned on the actor's final hidden state,
trained by REINFORCE on the GRPO advantages its choices produced.

pi(. | h) = floor(softmax((W h + b) / tau)), tau learned. Every `update_interval` steps, one AdamW step on
    loss = -mean(A * log pi(a | h)) - entropy_coef * mean H(pi(. | h))
over the buffered (h, a, A) of those steps, then the buffer is cleared.

Every rank holds the same Conductor and sees the same batch-global (h, a, A), so the updates stay identical
without a collective; its initialisation and its action sampling use their own seeded generators for that reason.
"""
import copy
import math

import torch
import torch.nn as nn

PROB_FLOOR = 1e-4


def floor_probs(probs: torch.Tensor, floor: float = PROB_FLOOR) -> torch.Tensor:
    """Clamp every probability to at least `floor`, then renormalise rows. Tensor[N, K] -> Tensor[N, K]."""
    clamped = probs.clamp(min=floor)
    return clamped / clamped.sum(-1, keepdim=True)


class Conductor(nn.Module):
    """pi(. | h) over K actions. h: Tensor[N, H] -> probs Tensor[N, K]."""

    def __init__(self, hidden_size: int, num_actions: int, tau_init: float = 1.0):
        super().__init__()
        self.head = nn.Linear(hidden_size, num_actions)
        # Zero init: the first choices are uniform, so no reward is favoured before any evidence.
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        self.log_tau = nn.Parameter(torch.tensor(math.log(tau_init)))  # log keeps tau > 0

    @property
    def tau(self) -> float:
        return float(self.log_tau.detach().exp())

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        logits = self.head(h.float()) / self.log_tau.exp()
        return floor_probs(torch.softmax(logits, dim=-1))


def reinforce_loss(probs: torch.Tensor, actions: torch.Tensor, advantages: torch.Tensor, entropy_coef: float):
    """-mean(A * log pi(a | h)) - entropy_coef * mean H(pi). probs: [N, K], actions: [N] long, advantages: [N].

    Returns (loss, mean entropy).
    """
    logp = probs.log()
    chosen = logp.gather(1, actions.long().unsqueeze(1)).squeeze(1)
    entropy = -(probs * logp).sum(-1).mean()
    return -(advantages.float() * chosen).mean() - entropy_coef * entropy, entropy


class ConductorLearner:
    """The Conductor with its optimizer, the (h, a, A) buffer and the action-sampling generator."""

    def __init__(self, hidden_size: int, num_actions: int, *, lr: float = 5e-5, entropy_coef: float = 1e-3,
                 update_interval: int = 3, tau_init: float = 1.0, seed: int = 0, device="cpu"):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.conductor = Conductor(hidden_size, num_actions, tau_init).to(device)
        self.optimizer = torch.optim.AdamW(self.conductor.parameters(), lr=lr)
        self.entropy_coef, self.update_interval = entropy_coef, update_interval
        self.generator = torch.Generator().manual_seed(seed)
        self.buffer = []          # [(h Tensor[N, H], actions Tensor[N], advantages Tensor[N])] since the last update
        self.steps_buffered = 0
        self.num_actions = num_actions

    @torch.no_grad()
    def probs(self, h: torch.Tensor) -> torch.Tensor:
        return self.conductor(h)

    @torch.no_grad()
    def act(self, h: torch.Tensor):
        """Each response draws its own action. Returns (actions Tensor[N] long, probs Tensor[N, K])."""
        probs = self.probs(h)
        return torch.multinomial(probs.cpu(), 1, generator=self.generator).squeeze(1), probs

    def random_actions(self, n: int) -> torch.Tensor:
        """Uniform actions (the `random` ablation): heterogeneous emphasis without learning."""
        return torch.randint(0, self.num_actions, (n,), generator=self.generator)

    @torch.no_grad()
    def expected_weights(self, h: torch.Tensor, eta: float) -> torch.Tensor:
        """Evaluation: the continuous weights (1 - eta) / K + eta * pi(. | h) instead of a sampled action."""
        return (1.0 - eta) / self.num_actions + eta * self.probs(h)

    def record(self, h: torch.Tensor, actions: torch.Tensor, advantages: torch.Tensor) -> dict:
        """Buffer one step; every `update_interval` steps take the REINFORCE step and clear the buffer."""
        self.buffer.append((h.detach().float().cpu(), actions.detach().long().cpu(), advantages.detach().float().cpu()))
        self.steps_buffered += 1
        if self.steps_buffered < self.update_interval:
            return {}
        return self.update()

    def update(self) -> dict:
        device = self.conductor.log_tau.device
        h, actions, adv = (torch.cat(parts).to(device) for parts in zip(*self.buffer))
        self.conductor.train()
        loss, entropy = reinforce_loss(self.conductor(h), actions, adv, self.entropy_coef)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.buffer, self.steps_buffered = [], 0
        return {"conductor/meta_loss": loss.item(), "conductor/meta_entropy": entropy.item()}

    def state_dict(self) -> dict:
        return copy.deepcopy({"conductor": self.conductor.state_dict(), "optimizer": self.optimizer.state_dict(),
                              "buffer": self.buffer, "steps_buffered": self.steps_buffered,
                              "generator": self.generator.get_state()})

    def load_state_dict(self, state: dict):
        self.conductor.load_state_dict(state["conductor"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.buffer = [tuple(t.clone() for t in item) for item in state["buffer"]]
        self.steps_buffered = state["steps_buffered"]
        self.generator.set_state(state["generator"])
