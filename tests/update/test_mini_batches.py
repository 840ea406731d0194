"""--ppo_mini_batch_size (rl/update/ppo.py): the rollout batch cut into mini-batches, one optimizer step each, every
step's ratio against the rollout policy's log-probs; --ppo_epochs repeats them.

The hand-worked cases run on a unigram policy (logits = a learnable bias over 3 tokens, whatever the context), so
that each SGD step can be written out in plain Python: d log pi(y) / d b = e_y - pi. The engine is DeepSpeed's as
ppo_update uses it (backward divides the loss by the gradient accumulation steps, step() steps the optimizer at each
accumulation boundary); the slow test at the end runs the same case through a real DeepSpeed engine.
"""
import math
import types

import pytest
import torch

from rl.config import parse_args
from rl.types import Rollout
from rl.update.batching import micro_batches, response_logprobs
from rl.update.loss import policy_loss
from rl.update.ppo import LossSettings, mini_batch_count, no_grad_logprobs, ppo_update
from rl.update.step_guard import StepGuard

V = 3  # the unigram policy's vocabulary


class UnigramLM(torch.nn.Module):
    """log pi(y | anything) = b_y - logsumexp(b): the tiny model whose SGD steps can be worked by hand."""

    def __init__(self, bias):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.tensor(bias, dtype=torch.float32))

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False, logits_to_keep=0):
        keep = logits_to_keep or input_ids.shape[1]
        return types.SimpleNamespace(logits=self.bias.expand(input_ids.shape[0], keep, V))


class AccumulatingEngine:
    """DeepSpeed's engine API as ppo_update and no_grad_logprobs use it, on a module and a torch optimizer:
    backward() divides the loss by gradient_accumulation_steps (DeepSpeed's scale_wrt_gas), step() steps the optimizer
    and zeroes the gradients on every gas-th micro-batch (is_gradient_accumulation_boundary) or, once
    set_gradient_accumulation_boundary was called, where it says; no gradient clipping."""

    def __init__(self, module, optimizer, gas):
        self.module, self.optimizer, self.gas = module, optimizer, gas
        self.micro_steps = self.optimizer_steps = 0
        self.boundary = None  # set_gradient_accumulation_boundary's override, as DeepSpeed keeps it
        self.grads = []       # each optimizer step's gradient, flattened

    def __call__(self, **kwargs):
        return self.module(**kwargs)

    def train(self):
        self.module.train()

    def gradient_accumulation_steps(self):
        return self.gas

    def is_gradient_accumulation_boundary(self):
        return (self.micro_steps + 1) % self.gas == 0 if self.boundary is None else self.boundary

    def set_gradient_accumulation_boundary(self, is_boundary):
        self.boundary = is_boundary

    def backward(self, loss):
        (loss / self.gas).backward()

    def step(self):
        if self.is_gradient_accumulation_boundary():
            self.grads.append(torch.cat([q.grad.detach().flatten().clone() for q in self.module.parameters()]))
            self.optimizer.step()
            self.optimizer.zero_grad()
            self.optimizer_steps += 1
        self.micro_steps += 1


def rollout(responses, advantages, prompt=(0,)) -> Rollout:
    """One row per response (token lists, right-padded with 0 under a 0 mask), after the same one-token prompt."""
    n, p, r = len(responses), len(prompt), max(len(x) for x in responses)
    ids = torch.zeros(n, p + r, dtype=torch.long)
    ids[:, :p] = torch.tensor(prompt)
    response_mask = torch.zeros(n, r)
    for i, tokens in enumerate(responses):
        ids[i, p:p + len(tokens)] = torch.tensor(tokens)
        response_mask[i, :len(tokens)] = 1.0
    attention = torch.cat([torch.ones(n, p, dtype=torch.long), response_mask.long()], 1)
    return Rollout(input_ids=ids, attention_mask=attention, response_mask=response_mask, prompt_len=p,
                   group_ids=torch.arange(n) // 2, completions=[""] * n, samples=[{}] * n,
                   turn_ids=torch.where(response_mask > 0, 0, -1), advantages=torch.tensor(advantages))


def settings(micro, mini_batches=1, ppo_epochs=1, loss_mode="vanilla", clip_ratio_low=0.2, clip_ratio_high=0.2,
             loss_agg_mode="token-mean", skip_zero_rows=False):
    return LossSettings(micro=micro, ppo_epochs=ppo_epochs, temperature=1.0, clip_ratio_low=clip_ratio_low,
                        clip_ratio_high=clip_ratio_high, clip_ratio_c=3.0, loss_agg_mode=loss_agg_mode, beta=0.0,
                        kl_type="k3", norm_len=4, is_correction="none", is_cap=2.0, skip_zero_rows=skip_zero_rows,
                        loss_mode=loss_mode, mini_batches=mini_batches)


class RecordingGuard(StepGuard):
    """The step guard, also keeping each optimizer step's gradient (it sees them all, before the step)."""

    def __init__(self):
        super().__init__(max_bad_steps=3, zero_stage=0, checkpoint_dir="unused")
        self.grads = []

    def before_optimizer_step(self, module, optimizer):
        self.grads.append(torch.cat([q.grad.detach().flatten().clone() for q in module.parameters()]))
        super().before_optimizer_step(module, optimizer)


def guard():
    g = RecordingGuard()
    g.start_step()
    return g


def train(engine, batch, s, step_guard=None):
    """What the trainer does: the rollout policy's log-probs where the update needs them, then the update."""
    no_grad_logprobs(engine, None, batch, s)
    return ppo_update(engine, batch, s, step_guard or guard()).metrics(with_kl=False)


# --- the hand-worked case: b0 = 0 (uniform), SGD with lr 1, two mini-batches of two rows, micro-batches of one ---
# mini-batch 1: row 0 says token 1 twice (A = +1), row 1 says token 2 (A = -1): 3 tokens
# mini-batch 2: row 2 says token 1 (A = +1), row 3 says token 0 then 2 (A = -0.5): 3 tokens
RESPONSES = [[1, 1], [2], [1], [0, 2]]
ADVANTAGES = [1.0, -1.0, 1.0, -0.5]
LR = 1.0


def softmax(b):
    z = [math.exp(x) for x in b]
    return [x / sum(z) for x in z]


def by_hand(mode, low, high, old_from="rollout", responses=RESPONSES, advantages=ADVANTAGES, steps=2, epochs=1):
    """The bias after the update and each step's loss, from the formulas in plain Python. Each step: token-mean over
    its own mini-batch's tokens; per token, r = pi_b(y) / pi_old(y) with pi_old the rollout policy (b0 = 0), or the
    current one with old_from="current" (the bug the test must tell apart); the loss's derivative in log pi(y):
    vanilla -A r where the clip does not bind (A > 0: r <= 1 + high; A < 0: r >= 1 - low), else 0; cispo
    -clip(r, 1 - low, 1 + high) A. Then d/db = that * (e_y - pi_b) / tokens, and b -= LR * d/db."""
    rows = list(zip(responses, advantages))
    per_step = len(rows) // steps
    b, losses = [0.0] * V, []
    rollout_pi = softmax(b)
    for _ in range(epochs):
        for k in range(steps):
            tokens = [(y, a) for ys, a in rows[k * per_step:(k + 1) * per_step] for y in ys]
            pi = softmax(b)
            old = rollout_pi if old_from == "rollout" else pi
            grad, loss = [0.0] * V, 0.0
            for y, a in tokens:
                r = pi[y] / old[y]
                clipped = min(max(r, 1 - low), 1 + high)
                if mode == "vanilla":
                    binds = (a > 0 and r > 1 + high) or (a < 0 and r < 1 - low)
                    loss += -a * (clipped if binds else r) / len(tokens)
                    slope = 0.0 if binds else -a * r
                else:  # cispo
                    loss += -clipped * a * math.log(pi[y]) / len(tokens)
                    slope = -clipped * a
                for j in range(V):
                    grad[j] += slope * ((j == y) - pi[j]) / len(tokens)
            b = [b[j] - LR * grad[j] for j in range(V)]
            losses.append(loss)
    return b, losses


def unigram_engine(micro_per_step):
    model = UnigramLM([0.0] * V)
    return AccumulatingEngine(model, torch.optim.SGD(model.parameters(), lr=LR), gas=micro_per_step), model


def test_first_step_by_hand_divides_by_its_own_mini_batchs_tokens():
    """Step 1 is on-policy (r = 1), pi0 = 1/3 each, over mini-batch 1's 3 tokens: token 1 twice with A = +1, token 2
    with A = -1. With e1 - pi0 = (-1/3, 2/3, -1/3) and e2 - pi0 = (-1/3, -1/3, 2/3):
    d/db = (-(e1 - pi0) - (e1 - pi0) + (e2 - pi0)) / 3 = ((2/3, -4/3, 2/3) + (-1/3, -1/3, 2/3)) / 3
         = (1/9, -5/9, 4/9).
    Dividing by all 6 tokens of the rollout instead would halve it."""
    engine, model = unigram_engine(micro_per_step=2)
    recorder = guard()
    train(engine, rollout(RESPONSES, ADVANTAGES), settings(micro=1, mini_batches=2), recorder)
    assert len(recorder.grads) == 2
    assert recorder.grads[0].tolist() == pytest.approx([1 / 9, -5 / 9, 4 / 9], rel=1e-5)


@pytest.mark.parametrize("mode,low,high", [
    ("vanilla", 0.2, 0.2),   # step 2: row 2's ratio 3 pi1(1) = 1.73 > 1.2 with A > 0: clipped, row 3's tokens train
    ("vanilla", 0.2, 10.0),  # no clip binds: the ratio itself (against pi0) scales the step
    ("cispo", 0.2, 0.28),    # the clipped, detached weight min(r, 1.28) on each token
])
def test_the_second_step_takes_its_ratio_against_the_rollout_policy(mode, low, high):
    engine, model = unigram_engine(micro_per_step=2)
    batch = rollout(RESPONSES, ADVANTAGES)
    metrics = train(engine, batch, settings(micro=1, mini_batches=2, loss_mode=mode, clip_ratio_low=low,
                                            clip_ratio_high=high))
    want, losses = by_hand(mode, low, high)
    wrong, _ = by_hand(mode, low, high, old_from="current")
    # the case tells the two readings apart: by 0.26, 0.09 and 0.013, far above float32's rounding
    assert max(abs(w - x) for w, x in zip(want, wrong)) > 0.01
    assert engine.optimizer_steps == 2
    assert model.bias.tolist() == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert batch.old_logp[:, 0].tolist() == pytest.approx([math.log(1 / 3)] * 4)  # the rollout's, never replaced
    # actor/pg_loss: the mean over the two optimizer steps of each step's loss
    assert metrics["actor/pg_loss"] == pytest.approx(sum(losses) / 2, rel=1e-5)


def test_epochs_repeat_the_mini_batches_against_the_same_rollout_policy():
    engine, model = unigram_engine(micro_per_step=2)
    train(engine, rollout(RESPONSES, ADVANTAGES), settings(micro=1, mini_batches=2, ppo_epochs=2,
                                                           clip_ratio_high=10.0))
    assert engine.optimizer_steps == 4
    assert model.bias.tolist() == pytest.approx(by_hand("vanilla", 0.2, 10.0, epochs=2)[0], rel=1e-5)


@pytest.mark.parametrize("loss_agg_mode", ["token-mean", "seq-mean-token-mean"])
def test_leaving_out_zero_advantage_rows_keeps_each_mini_batchs_denominators(loss_agg_mode):
    """Row 3 (in mini-batch 2) has advantage 0: with --skip_zero_advantage_rows it is not computed, yet its 2 tokens
    still count in mini-batch 2's token-mean (and its row in the seq-mean): the same step as training on it, and the
    same as the hand value (token-mean) where step 2 divides by 3 tokens."""
    advantages = ADVANTAGES[:3] + [0.0]
    results = {}
    for skip in (False, True):
        engine, model = unigram_engine(micro_per_step=1)  # micro-batches of 2: one per mini-batch, row 3 can go
        metrics = train(engine, rollout(RESPONSES, advantages),
                        settings(micro=2, mini_batches=2, clip_ratio_high=10.0, loss_agg_mode=loss_agg_mode,
                                 skip_zero_rows=skip))
        results[skip] = model.bias.tolist(), metrics
    assert results[True][1]["train/rows_skipped_frac"] == 0.25 and results[False][1]["train/rows_skipped_frac"] == 0
    assert results[True][0] == pytest.approx(results[False][0], rel=1e-5)
    assert results[True][1]["actor/pg_loss"] == pytest.approx(results[False][1]["actor/pg_loss"], rel=1e-5)
    if loss_agg_mode == "token-mean":
        assert results[True][0] == pytest.approx(by_hand("vanilla", 0.2, 10.0, advantages=advantages)[0], rel=1e-5)


def test_a_mini_batch_with_no_signal_still_steps_in_step_with_the_others():
    """Every row of mini-batch 1 has advantage 0: it still runs one micro-batch (one row, as ZeRO-3's collectives
    need) and takes its optimizer step, which moves nothing; mini-batch 2's step is the hand value."""
    advantages = [0.0, 0.0] + ADVANTAGES[2:]
    engine, model = unigram_engine(micro_per_step=2)
    train(engine, rollout(RESPONSES, advantages), settings(micro=1, mini_batches=2, clip_ratio_high=10.0,
                                                           skip_zero_rows=True))
    assert engine.optimizer_steps == 2 and engine.micro_steps == 1 + 2
    assert model.bias.tolist() == pytest.approx(by_hand("vanilla", 0.2, 10.0, advantages=advantages)[0], rel=1e-5)


def test_the_kept_rows_fill_as_few_micro_batches_as_they_need_and_the_step_is_the_same():
    """One mini-batch of 4 rows in micro-batches of 1 (4 accumulated); rows 1 and 2 have advantage 0. Left out, the
    other two take 2 forwards instead of 4, the last of them the optimizer step, and the step equals training on
    every row (and the hand value)."""
    advantages = [1.0, 0.0, 0.0, -0.5]
    results = {}
    for skip in (False, True):
        engine, model = unigram_engine(micro_per_step=4)
        train(engine, rollout(RESPONSES, advantages), settings(micro=1, clip_ratio_high=10.0, skip_zero_rows=skip))
        results[skip] = model.bias.tolist(), engine.micro_steps, engine.optimizer_steps
    assert results[False][1:] == (4, 1) and results[True][1:] == (2, 1)
    assert results[True][0] == pytest.approx(results[False][0], rel=1e-5)
    assert results[True][0] == pytest.approx(by_hand("vanilla", 0.2, 10.0, advantages=advantages, steps=1)[0],
                                             rel=1e-5)


def test_an_engine_that_accumulates_the_whole_rollout_is_refused():
    """Two mini-batches of 2 rows in micro-batches of 1 need 2 micro-batches per optimizer step, not 4: the engine
    must be built for the mini-batch (what the trainer passes to rl/engine/actor.py)."""
    engine, _ = unigram_engine(micro_per_step=4)
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        train(engine, rollout(RESPONSES, ADVANTAGES), settings(micro=1, mini_batches=2))


# --- one mini-batch: the update as it was ---

def update_before_mini_batches(engine, batch, s):
    """rl/update/ppo.py's ppo_update before --ppo_mini_batch_size (commit 4f217a9), one process: the reference the
    default must reproduce."""
    accumulation = len(batch) // s.micro
    agg = {"num_tokens": float(batch.response_mask.sum()) / accumulation, "num_seqs": s.micro, "norm_len": s.norm_len}
    keep = (batch.token_advantages(slice(None)) != 0).any(dim=1) if s.skip_zero_rows else None
    parts = micro_batches(batch.attention_mask, batch.prompt_len, s.micro, keep=keep)
    engine.train()
    for _ in range(s.ppo_epochs):
        for part in (mb.of(batch) for mb in parts):
            logp, _ = response_logprobs(engine, part.input_ids, part.attention_mask, part.prompt_len, s.temperature)
            old = part.old_logp if part.old_logp is not None else logp.detach()
            loss, _ = policy_loss(logp, old, part.advantages, part.response_mask, s.clip_ratio_low, s.clip_ratio_high,
                                  s.clip_ratio_c, s.loss_agg_mode, **agg)
            engine.backward(loss)
            engine.step()


def llama_batch(n=8, p=3, r=5, seed=0) -> Rollout:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 90, (n, p + r), generator=gen)
    lengths = torch.randint(1, r + 1, (n,), generator=gen)
    response_mask = (torch.arange(r)[None, :] < lengths[:, None]).float()
    attention = torch.ones(n, p + r, dtype=torch.long)
    attention[0, 0] = 0
    attention[:, p:] = response_mask.long()
    return Rollout(input_ids=ids, attention_mask=attention, response_mask=response_mask, prompt_len=p,
                   group_ids=torch.arange(n) // 4, completions=[""] * n, samples=[{}] * n,
                   turn_ids=torch.where(response_mask > 0, 0, -1),
                   advantages=torch.tensor([1.0, -1.0, 0.5, -0.5, 0.0, 0.0, 0.0, 0.0]))


@pytest.mark.parametrize("loss_agg_mode,skip_zero_rows,ppo_epochs", [
    ("token-mean", False, 1), ("seq-mean-token-mean", True, 1), ("token-mean", True, 2)])
def test_one_mini_batch_is_the_update_as_it_was(tiny_model_dir, loss_agg_mode, skip_zero_rows, ppo_epochs):
    """The default (one mini-batch) on the tiny Llama: each optimizer step's gradient and the weights after the update
    equal the pre-mini-batch code path's to float rounding (Adam, a real step). With the zero-advantage rows left
    out, the kept rows now fill 2 micro-batches of 2 instead of 4 of 1: the gradient's sums run in another order, and
    Adam's normalised step turns that rounding into up to about 1e-5 on near-zero gradients (lr 1e-2)."""
    from transformers import AutoModelForCausalLM
    weights, grads = {}, {}
    for path in ("now", "before"):
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
        engine = AccumulatingEngine(model, torch.optim.AdamW(model.parameters(), lr=1e-2), gas=4)
        batch, s = llama_batch(), settings(micro=2, loss_agg_mode=loss_agg_mode, skip_zero_rows=skip_zero_rows,
                                           ppo_epochs=ppo_epochs)
        no_grad_logprobs(engine, None, batch, s)
        if path == "now":
            ppo_update(engine, batch, s, guard())
        else:
            update_before_mini_batches(engine, batch, s)
        assert engine.optimizer_steps == ppo_epochs
        assert engine.micro_steps == ppo_epochs * (2 if skip_zero_rows and path == "now" else 4)
        weights[path] = torch.cat([q.detach().flatten() for q in model.parameters()])
        grads[path] = engine.grads
    start = torch.cat([q.detach().flatten() for q in AutoModelForCausalLM.from_pretrained(tiny_model_dir).parameters()])
    assert (weights["now"] - start).abs().max() > 1e-3  # the step moved the weights
    for now, before in zip(grads["now"], grads["before"], strict=True):
        torch.testing.assert_close(now, before, rtol=1e-5, atol=1e-8)
    regrouped = skip_zero_rows
    torch.testing.assert_close(weights["now"], weights["before"], rtol=1e-6, atol=3e-5 if regrouped else 1e-7)


# --- the flags ---

def test_mini_batch_count_uses_verls_meaning_prompts_over_all_ranks():
    assert mini_batch_count(8, 1, 4, None) == 1
    assert mini_batch_count(8, 1, 4, 2) == 4       # 8 prompts, 2 per step
    assert mini_batch_count(8, 2, 4, 4) == 4       # 16 prompts over 2 ranks, 4 per step: 8 responses per rank each
    with pytest.raises(ValueError, match="--ppo_mini_batch_size 3 must divide the 8 prompts"):
        mini_batch_count(8, 1, 4, 3)
    with pytest.raises(ValueError, match="do not split evenly over 4 ranks"):
        mini_batch_count(2, 4, 1, 2)               # 2 prompts x 1 response per step cannot go to 4 ranks


@pytest.mark.parametrize("argv,world,fragment", [
    (["--ppo_mini_batch_size", "3"], "1", "--ppo_mini_batch_size 3 must divide the 8 prompts of a step"),
    (["--ppo_mini_batch_size", "0"], "1", "--ppo_mini_batch_size 0 must divide"),
    (["--ppo_mini_batch_size", "4", "--per_device_train_micro_batch_size", "32"], "1",
     "--per_device_train_micro_batch_size 32 must divide the 16 responses per rank of each of the 2 mini-batches"),
    (["--ppo_mini_batch_size", "1", "--num_generations", "2", "--per_device_generation_batch_size", "2"], "4",
     "do not split evenly over 4 ranks"),
])
def test_bad_mini_batch_sizes_are_refused_naming_the_flag(argv, world, fragment, tiny_model_dir, capsys,
                                                          monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", world)
    with pytest.raises(SystemExit) as exc:
        parse_args(["--model_name_or_path", tiny_model_dir, *argv])
    assert fragment in str(exc.value) + capsys.readouterr().err


def test_the_default_micro_batch_divides_a_mini_batch(tiny_model_dir):
    args = parse_args(["--model_name_or_path", tiny_model_dir, "--per_device_generation_batch_size", "6",
                       "--num_generations", "4", "--ppo_mini_batch_size", "3"])
    assert args.per_device_train_micro_batch_size == 6  # 12 responses per mini-batch: its largest divisor up to 8
    assert args.ppo_mini_batch_size == 3  # recorded as given (a resumed run's flags compare as written)


def test_loss_settings_read_the_update_flags(tiny_model_dir):
    args = parse_args(["--model_name_or_path", tiny_model_dir, "--per_device_generation_batch_size", "6",
                       "--num_generations", "4", "--ppo_mini_batch_size", "2", "--loss_mode", "sapo",
                       "--tau_pos", "0.5", "--tau_neg", "2"])
    s = LossSettings.from_args(args)  # one process: the world is 1 rank
    assert (s.mini_batches, s.micro, s.loss_mode, s.tau_pos, s.tau_neg, s.loss_agg_mode) == (
        3, 8, "sapo", 0.5, 2.0, "seq-mean-token-mean")
    assert LossSettings.from_args(parse_args(["--model_name_or_path", tiny_model_dir])).mini_batches == 1


# --- a real DeepSpeed engine ---

@pytest.mark.slow
def test_deepspeed_takes_one_optimizer_step_per_mini_batch_as_worked_by_hand():
    """The hand-worked case through DeepSpeed stage 0 (its gradient accumulation, its boundary, torch SGD): the same
    bias as the plain-Python steps, two optimizer steps."""
    import deepspeed
    from tests.helpers import one_rank_process_group
    with one_rank_process_group():
        model = UnigramLM([0.0] * V)
        cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2, "train_batch_size": 2,
               "zero_optimization": {"stage": 0}, "steps_per_print": 10 ** 9}
        engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=LR),
                                          config=cfg)
        train(engine, rollout(RESPONSES, ADVANTAGES), settings(micro=1, mini_batches=2))
        assert engine.global_steps == 2
        assert model.bias.tolist() == pytest.approx(by_hand("vanilla", 0.2, 0.2)[0], rel=1e-5)
