"""MAESTRO's Conductor: a small policy over reward-emphasis actions, conditioned on the actor's final hidden state,
trained by REINFORCE on the GRPO advantages its choices produced.

pi(. | h) = floor(softmax((W h + b) / tau)), tau learned. Every `update_interval` steps, one AdamW step on
    loss = -mean(A * log pi(a | h)) - entropy_coef * mean H(pi(. | h))
over the buffered (h, a, A) of those steps, then the buffer is cleared. Those advantages rank the actions by each
reward's mean level (rl/advantages/maestro.py derives it), so the rewards must share one scale for the choice to mean
anything: --maestro_reward_scale (batch_rank by default, credo's reading).

Two recipes (RECIPES; --maestro_recipe). `paper`: raw h, AdamW lr 5e-5, an update every 3 steps (the paper's values,
meant for GPU-length runs). `small` (credo's deviation, for CPU-length runs): h scaled to unit L2 norm, lr 2e-2, an
update every step. Why: AdamW moves each weight by about lr per update, so one update moves a logit by at most about
lr x (|h|_1 + 1). SmolLM2-135M's final hidden state has |h|_1 ~ 680 (measured on --env mixed prompts), so at lr 5e-5
a logit moves <= 0.034 per update and a 40-step run (13 updates) leaves pi near uniform. With unit-norm h (|h|_1 ~ 14
there) lr 2e-2 moves a logit <= 0.3 per update, and 40 updates can separate the prompt kinds
(tests/methods/test_conductor.py::test_small_recipe_learns_in_forty_steps_where_the_paper_recipe_cannot).

Every rank holds the same Conductor and sees the same batch-global (h, a, A), so the updates stay identical
without a collective; its initialisation and its action sampling use their own seeded generators for that reason.
"""
import copy
import math

import torch
import torch.nn as nn

PROB_FLOOR = 1e-4  # the paper's Table 8
HIDDEN_NORMS = ("none", "l2")
RECIPES = {
    "paper": {"hidden_norm": "none", "lr": 5e-5, "update_interval": 3},
    "small": {"hidden_norm": "l2", "lr": 2e-2, "update_interval": 1},   # credo's deviation, see above
}


def floor_probs(probs: torch.Tensor, floor: float = PROB_FLOOR) -> torch.Tensor:
    """Clamp every probability to at least `floor`, then renormalise rows. Tensor[N, K] -> Tensor[N, K]."""
    clamped = probs.clamp(min=floor)
    return clamped / clamped.sum(-1, keepdim=True)


class Conductor(nn.Module):
    """pi(. | h) over K actions. h: Tensor[N, H] -> probs Tensor[N, K]."""

    def __init__(self, hidden_size: int, num_actions: int, tau_init: float = 1.0, hidden_norm: str = "none"):
        super().__init__()
        if hidden_norm not in HIDDEN_NORMS:
            raise ValueError(f"hidden_norm must be one of {HIDDEN_NORMS}, got {hidden_norm!r}")
        self.hidden_norm = hidden_norm
        self.head = nn.Linear(hidden_size, num_actions)
        # Zero init: the first choices are uniform, so no reward is favoured before any evidence.
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        self.log_tau = nn.Parameter(torch.tensor(math.log(tau_init)))  # log keeps tau > 0

    @property
    def tau(self) -> float:
        return float(self.log_tau.detach().exp())

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = h.float()
        if self.hidden_norm == "l2":
            h = h / h.norm(dim=-1, keepdim=True).clamp(min=1e-6)
        logits = self.head(h) / self.log_tau.exp()
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
                 update_interval: int = 3, tau_init: float = 1.0, hidden_norm: str = "none", seed: int = 0,
                 device="cpu"):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.conductor = Conductor(hidden_size, num_actions, tau_init, hidden_norm).to(device)
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
        """Uniform actions (the `random_action` ablation): heterogeneous emphasis without learning."""
        return torch.randint(0, self.num_actions, (n,), generator=self.generator)

    def random_weight_vectors(self, n: int) -> torch.Tensor:
        """The paper's Rand baseline: one random weight vector per response, Dirichlet(1, ..., 1), which is the
        uniform distribution on the simplex (credo's reading: the paper says "random weight vector"; uniform on
        the simplex is the one draw that favours no reward and no corner). Drawn as normalised Exp(1) variables
        (-log U), so the seeded generator keeps every rank's draws identical. Tensor[n, K], rows sum to 1."""
        u = torch.rand((n, self.num_actions), generator=self.generator, dtype=torch.float64).clamp(min=1e-12)
        e = -u.log()
        return (e / e.sum(-1, keepdim=True)).float()

    @torch.no_grad()
    def expected_weights(self, h: torch.Tensor) -> torch.Tensor:
        """Evaluation: the continuous weights pi(. | h) themselves (as the README and issue #6 say), not a sampled
        action. Tensor[N, H] -> Tensor[N, K], rows sum to 1."""
        return self.probs(h)

    @torch.no_grad()
    def expected_emphasis(self, h: torch.Tensor, eta: float) -> torch.Tensor:
        """The training-time weights averaged over the action: E_{a ~ pi}[w(a)] = (1 - eta) / K + eta * pi(. | h)."""
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
