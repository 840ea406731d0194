"""The multi-turn driver: every live trajectory's turn k in one batched generate, then env.step, until each
trajectory is done or has had --max_turns turns. Single-turn tasks are the case max_turns = 1.

Token layout of a trajectory (what the trainer sees): [prompt | model turn 1 | feedback 1 | model turn 2 | ...].
Token-in, token-out: the model's tokens are kept exactly as sampled (the log-probs are of those tokens), and turn
k + 1's context is turn k's context, its sampled tokens, and the chat template's tokens for the env's new messages
(rl.rollout.tokens.next_turn_tokens); the history is never re-rendered, so what the model saw at every turn is the
sequence the trainer scores, whatever the template does to past turns (Qwen3 drops their reasoning). On a template that
re-renders as a prefix (SmolLM2's) the decoded sequence is the chat-template text of the whole conversation (tested in
tests/rollout/test_episodes.py; other templates in tests/rollout/test_chat_template_conformance.py).
"""
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch

from rl.engine import dist
from rl.rollout.env_contract import ContractCheckedStep, check_reset, numeric_step_values
from rl.rollout.sampling_signals import layout_signals
from rl.rollout.tokens import encode_prompts, next_turn_tokens
from rl.types import Rollout


def any_live(sampler, live: list) -> bool:
    """Whether another turn is played. In lockstep (ZeRO-3 on several ranks) the ranks play the same number of
    turns, a rank whose trajectories all ended joining the others' generate calls with nothing to generate."""
    if not sampler.lockstep:
        return bool(live)
    return dist.all_reduce(torch.tensor([float(len(live))]), op="max").item() > 0


@dataclass(frozen=True)
class EpisodeSettings:
    """What the episode driver reads of the flags."""
    max_turns: int           # --max_turns
    max_prompt_seq_len: int  # --max_prompt_seq_len: a longer first prompt is left-truncated
    code_workers: int = 1    # --code_workers: env steps run in parallel (eval.py has no such flag: 1)

    @classmethod
    def from_args(cls, args) -> "EpisodeSettings":
        return cls(max_turns=args.max_turns, max_prompt_seq_len=args.max_prompt_seq_len,
                   code_workers=getattr(args, "code_workers", 1))


@torch.no_grad()
def run_episodes(sampler, tokenizer, envs: list, samples: list, group_ids: torch.Tensor, step_fn,
                 settings: EpisodeSettings, timings, signals=frozenset()):
    """Play N episodes (one env instance each) and lay them out for training.

    Args:
        sampler: generates every turn (rl/rollout/samplers.py; `make_sampler(SamplerSettings.from_args(args), model, tokenizer)`).
        settings: EpisodeSettings (any object with its fields: the tests pass parsed flags).
        envs: N fresh env instances; samples: N dataset rows; group_ids: Tensor[N] (same id = same prompt).
        step_fn: step_fn(env, text) -> StepResult, the guarded env.step (failures come back as done, score 0).
        signals: what the sampler records for later stages (rl/rollout/sampling_signals.py), laid out as batch.signals.
    Returns:
        Rollout with turn_scores Tensor[N, T] (NaN after a trajectory stopped), turn_ids Tensor[N, R]
        (turn index of each model token, -1 on feedback and padding) and env_values (per trajectory, per turn: the
        numbers of StepResult.components and .info, for the env/ metrics).
    Raises:
        EnvContractError at the first reset or step that returns the wrong type (rl/rollout/env_contract.py).
    """
    n, max_turns = len(envs), settings.max_turns
    eos = sampler.eos_ids
    conversations = [check_reset(env, env.reset(sample)) for env, sample in zip(envs, samples)]
    violations = []  # contract violations of env.step, recorded even where step_fn's guard swallows them
    for env in envs:
        env.step = ContractCheckedStep(env, violations)
    first_user_messages = [c[-1]["content"] for c in conversations]  # the `prompt` reward functions see
    prompt_ids, prompt_mask = encode_prompts(tokenizer, conversations, settings.max_prompt_seq_len)
    prompts = [prompt_ids[i][prompt_mask[i].bool()].tolist() for i in range(n)]
    segments = [[] for _ in range(n)]                 # (token list, turn index or -1 for feedback)
    sampler_logps = [[] for _ in range(n)]            # per segment: the sampler's log-probs (vLLM), else None
    turn_signals = [[] for _ in range(n)]             # per segment: rl.rollout.sampling_signals.TurnSignals, else None
    eos_text = {t: tokenizer.decode([t]) for t in eos}
    turn_scores = torch.full((n, max_turns), float("nan"))
    completions = [""] * n
    env_values = [[] for _ in range(n)]
    reward_time = 0.0
    live = list(range(n))
    for turn in range(max_turns):
        if not any_live(sampler, live):
            break
        contexts = [prompts[i] + [t for seg, _ in segments[i] for t in seg] for i in live]
        outputs, logps, recorded = sampler.generate_with_signals(contexts, timings, signals)
        texts = [tokenizer.decode([t for t in tokens if t not in eos]) for tokens in outputs]
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=max(1, getattr(settings, "code_workers", 1))) as pool:
            results = list(pool.map(step_fn, [envs[i] for i in live], texts))  # envs are independent
        if violations:
            raise violations[0]
        reward_time += time.perf_counter() - t0
        still_live = []
        for j, (i, tokens, text, result) in enumerate(zip(live, outputs, texts, results)):
            segments[i].append((tokens, turn))
            sampler_logps[i].append(logps[j] if logps is not None else None)
            turn_signals[i].append(recorded[j] if recorded is not None else None)
            completions[i] = text
            turn_scores[i, turn] = result.score
            env_values[i].append(numeric_step_values(result))
            history = conversations[i]
            conversations[i] = history + [{"role": "assistant", "content": text}]
            if result.done or turn == max_turns - 1:
                continue
            conversations[i] = conversations[i] + list(result.observation)
            feedback = next_turn_tokens(tokenizer, history, result.observation, tokens, eos_text, turn)
            segments[i].append((feedback, -1))
            sampler_logps[i].append(None)
            turn_signals[i].append(None)
            still_live.append(i)
        live = still_live
    for env in envs:
        vars(env).pop("step", None)  # the class's own step again (TCPO's counterfactuals use score_turn)
    timings["reward"] = timings.get("reward", 0.0) + reward_time
    batch = _layout(tokenizer, prompts, segments, turn_scores, completions, samples, group_ids, sampler.device)
    batch.rollout_logp = _sampler_logp_layout(segments, sampler_logps, batch.response_mask.shape[1], sampler.device)
    if signals:
        batch.signals = layout_signals(segments, turn_signals, batch.response_mask.shape[1], sampler.device)
    batch.prompts, batch.envs, batch.conversations = first_user_messages, envs, conversations
    batch.env_values = env_values
    return batch


def _layout(tokenizer, prompts, segments, turn_scores, completions, samples, group_ids, device) -> Rollout:
    pad = tokenizer.pad_token_id
    width_p = max(len(p) for p in prompts)
    bodies = [[(t, k) for seg, k in segs for t in seg] for segs in segments]
    width_r = max(1, max(len(b) for b in bodies))
    n = len(prompts)
    input_ids = torch.full((n, width_p + width_r), pad, dtype=torch.long)
    attention = torch.zeros((n, width_p + width_r), dtype=torch.long)
    turn_ids = torch.full((n, width_r), -1, dtype=torch.long)
    for i, (prompt, body) in enumerate(zip(prompts, bodies)):
        input_ids[i, width_p - len(prompt):width_p] = torch.tensor(prompt)
        attention[i, width_p - len(prompt):width_p + len(body)] = 1
        if body:
            input_ids[i, width_p:width_p + len(body)] = torch.tensor([t for t, _ in body])
            turn_ids[i, :len(body)] = torch.tensor([k for _, k in body])
    return Rollout(input_ids=input_ids.to(device), attention_mask=attention.to(device),
                   response_mask=(turn_ids >= 0).float().to(device), prompt_len=width_p, group_ids=group_ids.cpu(),
                   completions=completions, samples=samples, turn_ids=turn_ids.to(device), turn_scores=turn_scores)


def _sampler_logp_layout(segments, sampler_logps, width_r, device):
    """Tensor[N, R] of the sampler's log-probs on the model's tokens (0 elsewhere), aligned with the response part
    of `_layout`; None when the backend gave none (HF generate)."""
    if not any(lp is not None for row in sampler_logps for lp in row):
        return None
    out = torch.zeros((len(segments), width_r))
    for i, (segs, logps) in enumerate(zip(segments, sampler_logps)):
        pos = 0
        for (tokens, _), lp in zip(segs, logps):
            if lp is not None:
                out[i, pos:pos + len(tokens)] = torch.tensor(lp, dtype=torch.float32)
            pos += len(tokens)
    return out.to(device)
