"""--loss_mode (rl/update/loss.py): GSPO, CISPO and SAPO on fixed tensors against values worked out here in plain
Python from each paper's formula (math, no torch, never the function under test), the loss and its gradient with
respect to the log-probs (torch.autograd); and the flags that pick them."""
import math

import pytest
import torch

from rl.config import parse_args
from rl.update.loss import LOSS_MODES, policy_loss

# Four responses of 3, 2, 3 and 3 tokens (row 1 right-padded): each row's per-token log-ratios logp - old_logp and
# its advantage. The log-ratios of a row differ from token to token, so the sequence ratio is not any token's.
LOG_RATIOS = [[0.1, -0.05, 0.04], [0.5, 0.3], [0.3, 0.5, 0.1], [-0.3, -0.5, -0.4]]
ADVANTAGES = [1.0, 2.0, -1.0, -0.5]
OLD = [[-1.2, -0.7, -2.1], [-0.4, -1.6], [-0.9, -1.3, -0.2], [-1.5, -0.6, -2.4]]


def tensors(log_ratios=LOG_RATIOS, advantages=ADVANTAGES, old=OLD, pad_logp=-3.0):
    """logp (a leaf with grad), old_logp, token advantages and mask, Tensor[4, 3]; the padding's logp is arbitrary."""
    width = max(len(r) for r in log_ratios)
    logp_rows, old_rows, mask_rows = [], [], []
    for ratios, olds in zip(log_ratios, old):
        pad = width - len(ratios)
        logp_rows.append([o + d for o, d in zip(olds, ratios)] + [pad_logp] * pad)
        old_rows.append(list(olds) + [0.0] * pad)
        mask_rows.append([1.0] * len(ratios) + [0.0] * pad)
    logp = torch.tensor(logp_rows, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor(mask_rows, dtype=torch.float64)
    adv = torch.tensor(advantages, dtype=torch.float64)[:, None] * mask
    return logp, torch.tensor(old_rows, dtype=torch.float64), adv, mask


def run(loss_mode, loss_agg_mode, **kw):
    logp, old, adv, mask = tensors(**{k: kw.pop(k) for k in ("log_ratios", "advantages", "old") if k in kw})
    loss, stats = policy_loss(logp, old, adv, mask, loss_agg_mode=loss_agg_mode, loss_mode=loss_mode, **kw)
    loss.backward()
    return loss.item(), logp.grad, stats


def padded(rows, width=3):
    return [list(r) + [0.0] * (width - len(r)) for r in rows]


# --- GSPO (arXiv 2507.18071): s_i = exp(mean_t log r_i,t) (Eq. 7), J = mean_i min(s_i A_i, clip(s_i) A_i) (Eq. 5) ---

def gspo_by_hand(low, high, token_mean):
    """Per row: s_i, its clipped loss L_i = max(-A s, -A clip(s)), the same at every token; d L_i / d logp_i,t is
    -A_i s_i where the unclipped branch is taken (GSPO-token, Eq. 14: d s_i,t / d logp_i,t = s_i), else 0."""
    rows = []
    for ratios, a in zip(LOG_RATIOS, ADVANTAGES):
        s = math.exp(sum(ratios) / len(ratios))
        unclipped, clipped = -a * s, -a * min(max(s, 1 - low), 1 + high)
        rows.append((len(ratios), max(unclipped, clipped), -a * s if unclipped >= clipped else 0.0))
    tokens = sum(n for n, _, _ in rows)
    if token_mean:  # sum over every token / all tokens
        loss = sum(n * l for n, l, _ in rows) / tokens
        grads = [[g / tokens] * n for n, _, g in rows]
    else:  # seq-mean-token-mean, the paper's (1/G) sum_i (1/|y_i|) sum_t
        loss = sum(l for _, l, _ in rows) / len(rows)
        grads = [[g / (len(rows) * n)] * n for n, _, g in rows]
    return loss, padded(grads)


@pytest.mark.parametrize("loss_agg_mode", ["seq-mean-token-mean", "token-mean"])
def test_gspo_clips_the_length_normalised_sequence_ratio(loss_agg_mode):
    loss, grad, stats = run("gspo", loss_agg_mode, clip_ratio_low=0.2, clip_ratio_high=0.2)
    want_loss, want_grad = gspo_by_hand(0.2, 0.2, loss_agg_mode == "token-mean")
    assert loss == pytest.approx(want_loss, rel=1e-12)
    assert grad.tolist() == [pytest.approx(row, rel=1e-12, abs=1e-15) for row in want_grad]
    # row 1 (s = e^0.4 > 1.2, A > 0) and row 3 (s = e^-0.4 < 0.8, A < 0) are clipped as whole responses: every one
    # of their tokens has no gradient, though each token's own ratio (e^0.5, e^0.3; e^-0.3, ...) differs
    assert grad[1].abs().sum() == 0 and grad[3].abs().sum() == 0
    assert grad[0].abs().min() > 0 and grad[2, :3].abs().min() > 0
    assert stats["clipfrac"].item() == pytest.approx(5 / 11)  # rows 1 and 3: 2 + 3 of the 11 tokens


def test_gspo_hand_values():
    """The first row worked by hand: s_0 = exp((0.1 - 0.05 + 0.04) / 3) = e^0.03 = 1.030455, inside [0.8, 1.2]:
    its tokens' gradient under seq-mean-token-mean is -A s / (G |y|) = -1.030455 / 12 = -0.0858712."""
    _, grad, _ = run("gspo", "seq-mean-token-mean")
    assert grad[0].tolist() == pytest.approx([-0.0858712] * 3, rel=1e-6)


# --- CISPO (arXiv 2506.13585, Eq. 4-5): loss = -sg(clip(r, 1 - low, 1 + high)) A log pi, token-mean ---

def cispo_by_hand(low, high):
    loss, grads, tokens = 0.0, [], sum(len(r) for r in LOG_RATIOS)
    for ratios, olds, a in zip(LOG_RATIOS, OLD, ADVANTAGES):
        row = []
        for d, o in zip(ratios, olds):
            w = min(max(math.exp(d), 1 - low), 1 + high)
            loss += -w * a * (o + d) / tokens
            row.append(-w * a / tokens)  # the weight is a constant: d/dlogp of -w A logp is -w A
        grads.append(row)
    return loss, padded(grads)


def test_cispo_weights_the_token_log_prob_by_the_clipped_detached_ratio():
    loss, grad, stats = run("cispo", "token-mean", clip_ratio_low=0.2, clip_ratio_high=0.28)
    want_loss, want_grad = cispo_by_hand(0.2, 0.28)
    assert loss == pytest.approx(want_loss, rel=1e-12)
    assert grad.tolist() == [pytest.approx(row, rel=1e-12, abs=1e-15) for row in want_grad]
    # ratios above 1.28: row 1's e^0.5 and e^0.3, row 2's e^0.3 and e^0.5; below 0.8: row 3's e^-0.3, e^-0.5, e^-0.4
    assert stats["clipfrac"].item() == pytest.approx(4 / 11) and stats["clipfrac_lower"].item() == pytest.approx(3 / 11)


def test_cispo_keeps_the_gradient_of_tokens_the_ppo_clip_drops():
    """Row 1 (A = 2, ratios e^0.5 and e^0.3 above 1 + 0.28): vanilla's clipped surrogate gives its tokens no
    gradient; CISPO's is -1.28 * 2 / 11 on each (the weight capped, the token kept)."""
    _, vanilla, _ = run("vanilla", "token-mean", clip_ratio_low=0.2, clip_ratio_high=0.28)
    _, cispo, _ = run("cispo", "token-mean", clip_ratio_low=0.2, clip_ratio_high=0.28)
    assert vanilla[1].abs().sum() == 0
    assert cispo[1, :2].tolist() == pytest.approx([-1.28 * 2 / 11] * 2)


def test_cispo_with_no_lower_bound_as_minimax_m1_trains():
    """--clip_ratio_low 1 (the paper's eps_low large): row 3's ratios (< 0.8) keep their own weight."""
    _, grad, stats = run("cispo", "token-mean", clip_ratio_low=1.0, clip_ratio_high=0.28)
    assert grad[3].tolist() == pytest.approx([0.5 * math.exp(d) / 11 for d in LOG_RATIOS[3]], rel=1e-12)
    assert stats["clipfrac_lower"].item() == 0.0


# --- SAPO (arXiv 2511.20347, section 3): f = sigma(tau (r - 1)) 4 / tau, tau = tau_pos if A > 0 else tau_neg ---

def sapo_by_hand(tau_pos, tau_neg):
    """loss_i,t = -f(r) A; d/dlogp = -A r f'(r) = -A r 4 sigma (1 - sigma) (dr/dlogp = r); seq-mean-token-mean."""
    loss, grads, g = 0.0, [], len(LOG_RATIOS)
    for ratios, a in zip(LOG_RATIOS, ADVANTAGES):
        tau, n, row = tau_pos if a > 0 else tau_neg, len(ratios), []
        for d in ratios:
            r = math.exp(d)
            sig = 1 / (1 + math.exp(-tau * (r - 1)))
            loss += -sig * 4 / tau * a / (g * n)
            row.append(-a * r * 4 * sig * (1 - sig) / (g * n))
        grads.append(row)
    return loss, padded(grads)


@pytest.mark.parametrize("tau_pos,tau_neg", [(1.0, 1.05), (2.0, 4.0)])
def test_sapo_soft_gate_loss_and_gradient(tau_pos, tau_neg):
    loss, grad, stats = run("sapo", "seq-mean-token-mean", tau_pos=tau_pos, tau_neg=tau_neg)
    want_loss, want_grad = sapo_by_hand(tau_pos, tau_neg)
    assert loss == pytest.approx(want_loss, rel=1e-12)
    assert grad.tolist() == [pytest.approx(row, rel=1e-12, abs=1e-15) for row in want_grad]
    assert stats["clipfrac"].item() == 0.0  # no hard clip: every token keeps a (smaller) gradient
    assert grad[:, :2].abs().min() > 0


def test_sapo_hand_values():
    """Row 1's first token by hand, tau_pos = 1: r = e^0.5 = 1.648721, sigma(0.648721) = 0.656722, the gate's slope
    4 sigma (1 - sigma) = 0.901753; d/dlogp = -2 * 1.648721 * 0.901753 / (4 * 2) = -0.371685."""
    _, grad, _ = run("sapo", "seq-mean-token-mean")
    assert grad[1, 0].item() == pytest.approx(-0.371685, rel=1e-5)


# --- what every mode shares ---

@pytest.mark.parametrize("loss_mode", LOSS_MODES)
def test_on_policy_every_mode_has_the_policy_gradient(loss_mode):
    """At ratio 1 (the first step on fresh rollouts) every loss's gradient is -A per token before aggregation:
    token-mean gives -A / 11 on each of the 11 tokens."""
    _, grad, _ = run(loss_mode, "token-mean", log_ratios=[[0.0] * len(r) for r in LOG_RATIOS])
    want = padded([[-a / 11] * len(r) for r, a in zip(LOG_RATIOS, ADVANTAGES)])
    assert grad.tolist() == [pytest.approx(row, rel=1e-12, abs=1e-15) for row in want]


@pytest.mark.parametrize("loss_mode", LOSS_MODES)
def test_a_zero_advantage_row_has_exactly_zero_loss_and_gradient(loss_mode):
    """What --skip_zero_advantage_rows relies on, for every mode: row 0's advantage 0 contributes nothing."""
    advantages = [0.0] + ADVANTAGES[1:]
    loss, grad, _ = run(loss_mode, "token-mean", advantages=advantages)
    assert grad[0].abs().sum() == 0
    only_others, _, _ = run(loss_mode, "token-mean", advantages=advantages,
                            log_ratios=[[0.7, -0.2, 0.9]] + LOG_RATIOS[1:])  # row 0's ratios changed: no effect
    assert only_others == loss


def test_unknown_loss_mode_is_refused():
    with pytest.raises(ValueError, match="loss_mode"):
        run("reinforce", "token-mean")


# --- the flags ---

@pytest.mark.parametrize("argv,loss_mode,loss_agg_mode", [
    ([], "vanilla", "token-mean"),
    (["--loss_mode", "gspo"], "gspo", "seq-mean-token-mean"),
    (["--loss_mode", "sapo"], "sapo", "seq-mean-token-mean"),
    (["--loss_mode", "cispo"], "cispo", "token-mean"),
    (["--loss_mode", "gspo", "--loss_agg_mode", "token-mean"], "gspo", "token-mean"),  # an explicit choice wins
])
def test_loss_mode_sets_its_papers_aggregation_unless_given(argv, loss_mode, loss_agg_mode, tiny_model_dir):
    args = parse_args(["--model_name_or_path", tiny_model_dir, *argv])
    assert (args.loss_mode, args.loss_agg_mode) == (loss_mode, loss_agg_mode)


@pytest.mark.parametrize("argv,fragment", [
    (["--loss_mode", "sapo", "--tau_neg", "0"], "--tau_neg must be > 0"),
    (["--loss_mode", "sapo", "--tau_pos", "-1"], "--tau_pos must be > 0"),
    (["--loss_mode", "ppo"], "--loss_mode: invalid choice"),
])
def test_bad_loss_flags_are_refused_naming_the_flag(argv, fragment, tiny_model_dir, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(["--model_name_or_path", tiny_model_dir, *argv])
    assert fragment in str(exc.value) + capsys.readouterr().err
