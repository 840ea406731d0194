"""train.py flags of MAESTRO and of the open-domain rewards every method can name in --reward_funcs (fmt, ppl, ent,
len, pref), and their parse-time checks (rl/config.py calls both)."""
import os

from rl.conductor import HIDDEN_NORMS, RECIPES

MAESTRO_REWARDS = ("fmt", "ppl", "ent", "len", "pref", "correctness")
MAESTRO_WEIGHTS = ("conductor", "equal", "random", "random_action")
PAPER = RECIPES["paper"]


def add_maestro_flags(p):
    g = p.add_argument_group("MAESTRO (a Conductor mixes open-domain rewards per response) and the open-domain rewards")
    g.add_argument("--maestro_rewards", default="fmt,ppl,ent,len,pref",
                   help=f"rewards the Conductor chooses between, from {','.join(MAESTRO_REWARDS)} (paper: the first five)")
    g.add_argument("--maestro_weights", choices=MAESTRO_WEIGHTS, default="conductor",
                   help="who sets each response's reward weights: conductor (sampled emphasis actions); equal (1/K); "
                        "random (the paper's Rand: a random weight vector per response, Dirichlet(1) = uniform on "
                        "the simplex); random_action (a uniform random emphasis action per response)")
    g.add_argument("--maestro_emphasis", type=float, default=0.5,
                   help="eta in w(a) = (1 - eta) / K + eta * onehot(a): credo's reading, not in the paper's text, "
                        "which says only that an action induces a weight configuration; 1.0 = pure emphasis")
    g.add_argument("--maestro_recipe", choices=tuple(RECIPES), default="paper",
                   help=f"Conductor optimisation preset. paper: raw h, lr {PAPER['lr']:g}, an update every "
                        f"{PAPER['update_interval']} steps (the paper's values; for GPU-length runs: in a 40-step run "
                        "the Conductor barely moves). small: credo's deviation for short CPU runs: unit-norm h, "
                        f"lr {RECIPES['small']['lr']:g}, an update every step. The three flags below override it")
    g.add_argument("--maestro_hidden_norm", choices=HIDDEN_NORMS, default=None,
                   help="Conductor input: none = the raw final hidden state (paper); l2 = scaled to unit norm; "
                        "unset (None) = --maestro_recipe's")
    g.add_argument("--maestro_update_interval", type=int, default=None,
                   help=f"steps between Conductor REINFORCE updates; unset (None) = --maestro_recipe's "
                        f"(paper: {PAPER['update_interval']})")
    g.add_argument("--maestro_lr", type=float, default=None,
                   help=f"Conductor AdamW learning rate; unset (None) = --maestro_recipe's (paper: {PAPER['lr']:g})")
    g.add_argument("--maestro_entropy_coef", type=float, default=1e-3, help="Conductor entropy bonus (paper: 1e-3)")
    g.add_argument("--maestro_tau_init", type=float, default=1.0, help="initial (learned) Conductor temperature")
    g.add_argument("--maestro_kl_in_reward", type=float, default=0.0,
                   help="beta_r: each response's reward becomes w . r - beta_r * KL(policy || reference) on it "
                        "(--kl_type estimator, mean over its tokens), so the advantage the Conductor learns from "
                        "includes it (the paper's figure 2: 0.1). 0 = off, credo's default: the KL stays in the loss "
                        "(--beta) as in GRPO. > 0 loads the frozen reference even with --beta 0")
    g.add_argument("--len_min", type=int, default=16, help="len reward: 1 at or below this many response tokens")
    g.add_argument("--len_max", type=int, default=64, help="len reward: falls linearly to 0 at this many tokens")
    g.add_argument("--reward_model_name_or_path", default=None,
                   help="sequence-classification reward model for the pref reward (MAESTRO skips pref with a warning "
                        "when unset; --reward_funcs pref refuses to start)")


def validate_open_domain_rewards(args, bad):
    """--reward_funcs naming fmt / ppl / ent / len / pref (any method) and --len_min / --len_max."""
    if not 0 <= args.len_min < args.len_max:
        bad(f"--len_min {args.len_min} / --len_max {args.len_max}: need 0 <= len_min < len_max")
    if "pref" in args.reward_funcs and not args.reward_model_name_or_path:
        bad("--reward_funcs pref scores with a reward model: pass --reward_model_name_or_path")
    check_reward_model_path(args, bad)


def check_reward_model_path(args, bad):
    path = args.reward_model_name_or_path
    from rl.config import is_local_model_path
    if path and is_local_model_path(path):
        path = args.reward_model_name_or_path = os.path.expanduser(path)
        if not os.path.exists(path):
            bad(f"--reward_model_name_or_path {path} does not exist")


def resolve_recipe(args):
    """Fill the Conductor flags left unset from --maestro_recipe (explicit flags win)."""
    recipe = RECIPES[args.maestro_recipe]
    for key in ("hidden_norm", "lr", "update_interval"):
        if getattr(args, f"maestro_{key}") is None:
            setattr(args, f"maestro_{key}", recipe[key])


def validate_maestro(args, bad):
    validate_open_domain_rewards(args, bad)
    resolve_recipe(args)
    if args.maestro_kl_in_reward < 0:
        bad(f"--maestro_kl_in_reward must be >= 0, got {args.maestro_kl_in_reward}")
    if args.algo != "maestro":
        if args.maestro_kl_in_reward > 0:
            bad("--maestro_kl_in_reward puts the KL into MAESTRO's mixed reward and needs --algo maestro "
                "(other methods: --beta puts it in the loss)")
        return
    args.maestro_rewards = [n.strip() for n in args.maestro_rewards.split(",") if n.strip()]
    unknown = [n for n in args.maestro_rewards if n not in MAESTRO_REWARDS]
    if unknown:
        bad(f"--maestro_rewards: unknown reward(s) {','.join(unknown)}; choose from {','.join(MAESTRO_REWARDS)}")
    if len(set(args.maestro_rewards)) != len(args.maestro_rewards):
        bad(f"--maestro_rewards lists a reward twice: {','.join(args.maestro_rewards)}")
    if len([n for n in args.maestro_rewards if n != "pref" or args.reward_model_name_or_path]) < 2:
        bad("--maestro_rewards needs at least two rewards to orchestrate (pref counts only with "
            "--reward_model_name_or_path)")
    if args.max_turns != 1:
        bad("--algo maestro scores single responses; use --max_turns 1")
    if args.reward_funcs != ["correctness"] or args.reward_weights is not None:
        bad("--algo maestro mixes --maestro_rewards with the Conductor's weights; drop --reward_funcs / "
            "--reward_weights (add `correctness` to --maestro_rewards to mix in the verifier)")
    if not 0 <= args.maestro_emphasis <= 1:
        bad(f"--maestro_emphasis must be in [0, 1], got {args.maestro_emphasis}")
    if args.maestro_update_interval < 1 or args.maestro_tau_init <= 0:
        bad("--maestro_update_interval must be >= 1 and --maestro_tau_init > 0")
    if args.maestro_lr < 0:
        bad(f"--maestro_lr must be >= 0, got {args.maestro_lr}")
