"""A hand-worked 3-turn TCPO example (issue 42 item 2): scores, eligibility, each raw part, the credit sum and the
advantage, worked out in the comments from issue 4's five steps (see rl/advantages/tcpo.py), for --episode_end
max_turns and success, each under --tcpo_first_turn_prior zero and none. Every expected number below is written
from the arithmetic in its comment, not copied from the function's output.

Knobs (the defaults): tau 1, beta_pres 0.1, beta_reg 1, lambda_hind 1, gamma 0.9, eps 1e-6.

Prompt 0 has three trajectories, prompt 1 one (D, to show that peers and groups never cross prompts):
    A: solves at turn 1, keeps it at turn 2, breaks it at turn 3 (1.0, 1.0, 0.5)
    B: starts at 0, half right, then solves              (0.0, 0.5, 1.0)
    C: 0 twice, then half right                           (0.0, 0.0, 0.5)
    D: prompt 1, never right                              (0.0, 0.0, 0.0)
Under --episode_end success A stops after its turn 1 (its turns 2 and 3 are NaN); B and C never reach full marks
before their last turn, so they are the same under both episode ends.
"""
import math

import pytest
import torch

from rl.advantages.tcpo import eligible_turns, tcpo

NAN = float("nan")
EPS = 1e-6
KNOBS = dict(tau=1.0, beta_pres=0.1, beta_reg=1.0, lambda_hind=1.0, gamma=0.9, eps=EPS)
GROUPS = torch.tensor([0, 0, 0, 1])
MAX_TURNS = [[1.0, 1.0, 0.5],   # A
             [0.0, 0.5, 1.0],   # B
             [0.0, 0.0, 0.5],   # C
             [0.0, 0.0, 0.0]]   # D (prompt 1)
SUCCESS = [[1.0, NAN, NAN],     # A: stopped at its first success
           [0.0, 0.5, 1.0],
           [0.0, 0.0, 0.5],
           [0.0, 0.0, 0.0]]
ZEROS = [[0.0] * 3] * 4


def run(scores, first_turn_prior, counterfactual=None):
    scores = torch.tensor(scores)
    adv, parts = tcpo(scores, GROUPS, first_turn_prior=first_turn_prior, counterfactual=counterfactual,
                      return_parts=True, **KNOBS)
    return eligible_turns(scores, KNOBS["tau"], first_turn_prior).tolist(), adv, parts


def z(deviations, std, prior):
    """A (prompt, turn) group's advantages from its hand-computed deviations from the mean and its sample std."""
    return [dev / (std + EPS) * prior for dev in deviations]


def flat(rows):
    return [x for row in rows for x in row]


def check(adv, parts, imp, pres, reg, hind, credit, expected_adv):
    for name, want in (("imp", imp), ("pres", pres), ("reg", reg), ("hind", hind), ("cf", ZEROS)):
        assert flat(parts[name].tolist()) == pytest.approx(flat(want), abs=1e-12), name
    total = parts["imp"] + parts["pres"] + parts["reg"] + parts["hind"]
    assert flat(total.tolist()) == pytest.approx(flat(credit), abs=1e-12)
    assert flat(adv.tolist()) == pytest.approx(flat(expected_adv), rel=1e-5, abs=1e-7)


# Prior best m (zero prior; max_turns):  A (0, 1, 1)   B (0, 0, 0.5)   C (0, 0, 0)   D (0, 0, 0)
# d = r - m:                             A (1, 0, -.5) B (0, .5, .5)   C (0, 0, .5)  D (0, 0, 0)
# future best u = max_{t>=k} r:          A (1, 1, .5)  B (1, 1, 1)     C (.5, .5, .5) D (0, 0, 0)
# Turn-1 advantages of prompt 0 when the credits are (1, .5, -.5): mean 1/3, deviations (2/3, 1/6, -5/6),
# sample variance (4/9 + 1/36 + 25/36) / 2 = (42/36) / 2 = 7/12, std sqrt(7/12), gamma^0 = 1.
TURN1_ZERO = z([2 / 3, 1 / 6, -5 / 6], math.sqrt(7 / 12), 1.0)
# Turn-1 advantages of prompt 0 when the credits are (.25, .25, -.5): mean 0, sample variance
# (.0625 + .0625 + .25) / 2 = .1875 = 3/16, std sqrt(3)/4.
TURN1_NONE = z([0.25, 0.25, -0.5], math.sqrt(3) / 4, 1.0)


def test_max_turns_zero_prior_credits_keeping_a_solution_above_stalling_and_punishes_breaking_it():
    eligible, adv, parts = run(MAX_TURNS, "zero")
    # eligible = d <= 0 and m < 1: A never (improves at 1, solved before at 2 and 3); B at turn 1 only (0 <= 0;
    # turns 2 and 3 improve); C at turns 1 and 2 (0, 0), not 3 (improves); D (prompt 1) everywhere
    assert eligible == [[False, False, False], [True, False, False], [True, True, False], [True, True, True]]
    imp = [[1.0, 0.0, 0.0], [0.0, 0.5, 0.5], [0.0, 0.0, 0.5], [0.0, 0.0, 0.0]]   # max(d, 0)
    pres = [[0.0, 0.1, 0.0], [0.0] * 3, [0.0] * 3, [0.0] * 3]  # A turn 2: solved before (m = 1) and r = 1 >= m
    reg = [[0.0, 0.0, -0.5], [0.0] * 3, [0.0] * 3, [0.0] * 3]  # A turn 3: -1 * (m - r) = -(1 - 0.5)
    # hindsight, turn 1, prompt 0's eligible B (u 1) and C (u .5): B 1 - .5 = .5, C .5 - 1 = -.5.
    # Turn 2: C is prompt 0's only eligible trajectory (no peer): 0. D has no peer in prompt 1 at any turn: 0.
    hind = [[0.0] * 3, [0.5, 0.0, 0.0], [-0.5, 0.0, 0.0], [0.0] * 3]
    # credit = imp + pres + reg + hind:  A (1, .1, -.5)  B (.5, .5, .5)  C (-.5, 0, .5)  D (0, 0, 0)
    credit = [[1.0, 0.1, -0.5], [0.5, 0.5, 0.5], [-0.5, 0.0, 0.5], [0.0, 0.0, 0.0]]
    # turn 2 (.1, .5, 0): mean .2, deviations (-.1, .3, -.2), variance (.01 + .09 + .04) / 2 = .07, times gamma .9
    turn2 = z([-0.1, 0.3, -0.2], math.sqrt(0.07), 0.9)
    # turn 3 (-.5, .5, .5): mean 1/6, deviations (-2/3, 1/3, 1/3), variance (4/9 + 1/9 + 1/9) / 2 = 1/3,
    # times gamma^2 = .81
    turn3 = z([-2 / 3, 1 / 3, 1 / 3], math.sqrt(1 / 3), 0.81)
    expected = [[TURN1_ZERO[i], turn2[i], turn3[i]] for i in range(3)] + [[0.0, 0.0, 0.0]]  # D: a group of one
    check(adv, parts, imp, pres, reg, hind, credit, expected)
    # at turn 2 keeping the solution (.1) ranks below B's improvement (.5) but above C's stall (0);
    # breaking it at turn 3 is the only negative credit of that turn
    assert adv[1, 1] > adv[0, 1] > adv[2, 1] and adv[0, 2] < 0 < adv[1, 2]


def test_max_turns_first_turn_without_prior_gets_only_hindsight_credit():
    eligible, adv, parts = run(MAX_TURNS, "none")
    # every present first turn is eligible (no prior to improve on); turns 2 and 3 as under the zero prior,
    # because m at turn 2 is still r at turn 1
    assert eligible == [[True, False, False], [True, False, False], [True, True, False], [True, True, True]]
    imp = [[0.0, 0.0, 0.0], [0.0, 0.5, 0.5], [0.0, 0.0, 0.5], [0.0, 0.0, 0.0]]  # A's first-turn 1.0 is gone
    pres = [[0.0, 0.1, 0.0], [0.0] * 3, [0.0] * 3, [0.0] * 3]
    reg = [[0.0, 0.0, -0.5], [0.0] * 3, [0.0] * 3, [0.0] * 3]
    # hindsight, turn 1, prompt 0's eligible A (u 1), B (u 1), C (u .5):
    # A 1 - (1 + .5) / 2 = .25, B 1 - (1 + .5) / 2 = .25, C .5 - (1 + 1) / 2 = -.5; D no peer: 0
    hind = [[0.25, 0.0, 0.0], [0.25, 0.0, 0.0], [-0.5, 0.0, 0.0], [0.0] * 3]
    credit = [[0.25, 0.1, -0.5], [0.25, 0.5, 0.5], [-0.5, 0.0, 0.5], [0.0, 0.0, 0.0]]
    turn2 = z([-0.1, 0.3, -0.2], math.sqrt(0.07), 0.9)           # turns 2 and 3 as under the zero prior
    turn3 = z([-2 / 3, 1 / 3, 1 / 3], math.sqrt(1 / 3), 0.81)
    expected = [[TURN1_NONE[i], turn2[i], turn3[i]] for i in range(3)] + [[0.0, 0.0, 0.0]]
    check(adv, parts, imp, pres, reg, hind, credit, expected)
    assert adv[0, 0] == adv[1, 0]  # A's solved first turn and B's 0 share one future best: the same credit


def test_success_end_gives_turns_after_a_success_nothing_and_leaves_them_out_of_the_groups():
    eligible, adv, parts = run(SUCCESS, "zero")
    # A's NaN turns are neither eligible nor credited; B, C, D as under max_turns
    assert eligible == [[False, False, False], [True, False, False], [True, True, False], [True, True, True]]
    imp = [[1.0, 0.0, 0.0], [0.0, 0.5, 0.5], [0.0, 0.0, 0.5], [0.0, 0.0, 0.0]]
    # no turn follows a success, so preservation and regression never fire
    pres = reg = ZEROS
    # turn 1: B (u 1) vs C (u .5), as under max_turns: .5 and -.5
    hind = [[0.0] * 3, [0.5, 0.0, 0.0], [-0.5, 0.0, 0.0], [0.0] * 3]
    credit = [[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [-0.5, 0.0, 0.5], [0.0, 0.0, 0.0]]
    # turn 2: A is in no group; B .5 and C 0: mean .25, deviations (.25, -.25), variance (.0625 + .0625) / 1,
    # std sqrt(.125), times .9
    b2, c2 = z([0.25, -0.25], math.sqrt(0.125), 0.9)
    # turn 3: B .5 and C .5, a constant group: 0
    expected = [[TURN1_ZERO[0], 0.0, 0.0], [TURN1_ZERO[1], b2, 0.0], [TURN1_ZERO[2], c2, 0.0], [0.0, 0.0, 0.0]]
    check(adv, parts, imp, pres, reg, hind, credit, expected)


def test_success_end_first_turn_without_prior_gets_only_hindsight_credit():
    eligible, adv, parts = run(SUCCESS, "none")
    assert eligible == [[True, False, False], [True, False, False], [True, True, False], [True, True, True]]
    imp = [[0.0, 0.0, 0.0], [0.0, 0.5, 0.5], [0.0, 0.0, 0.5], [0.0, 0.0, 0.0]]
    pres = reg = ZEROS
    # turn 1: A's future best is its turn-1 1.0 (its later turns are NaN), so the same as under max_turns:
    # A .25, B .25, C -.5
    hind = [[0.25, 0.0, 0.0], [0.25, 0.0, 0.0], [-0.5, 0.0, 0.0], [0.0] * 3]
    credit = [[0.25, 0.0, 0.0], [0.25, 0.5, 0.5], [-0.5, 0.0, 0.5], [0.0, 0.0, 0.0]]
    b2, c2 = z([0.25, -0.25], math.sqrt(0.125), 0.9)             # turns 2 and 3 as under the zero prior
    expected = [[TURN1_NONE[0], 0.0, 0.0], [TURN1_NONE[1], b2, 0.0], [TURN1_NONE[2], c2, 0.0], [0.0, 0.0, 0.0]]
    check(adv, parts, imp, pres, reg, hind, credit, expected)


def test_counterfactual_refines_an_eligible_turn_and_is_ignored_after_a_solution():
    # max_turns, zero prior; a counterfactual of .4 for A's turn 2 (after its solution: not eligible) and for C's
    # turn 2 (0 after 0: eligible, hindsight 0 for want of a peer)
    cf = torch.full((4, 3), NAN)
    cf[0, 1] = cf[2, 1] = 0.4
    _, adv, parts = run(MAX_TURNS, "zero", counterfactual=cf)
    assert parts["cf"][:, 1].tolist() == pytest.approx([0.0, 0.0, 0.4, 0.0])
    # C's delayed credit (1 - .5) * 0 + .5 * .4 = .2, so turn 2's credits are A .1, B .5, C .2 = (3, 15, 6) / 30:
    # mean 8/30, deviations (-5, 7, -2) / 30, variance (25 + 49 + 4) / 900 / 2 = 39/900, std sqrt(39)/30, times .9
    turn2 = z([-5 / 30, 7 / 30, -2 / 30], math.sqrt(39) / 30, 0.9)
    assert adv[:3, 1].tolist() == pytest.approx(turn2, rel=1e-5)
    assert adv[:, 0].tolist() == pytest.approx(TURN1_ZERO + [0.0], rel=1e-5)  # other turns untouched
