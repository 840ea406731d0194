"""train.py flags of the open-domain rewards every method can name in --reward_funcs (fmt, ppl, ent, len, pref;
rewards/policy_rewards.py) and their parse-time checks (rl/config.py calls both). MAESTRO mixes the same rewards."""
import os


def add_policy_reward_flags(p):
    g = p.add_argument_group("open-domain rewards (--reward_funcs fmt, ppl, ent, len, pref; MAESTRO's rewards)")
    g.add_argument("--len_min", type=int, default=16, help="len reward: 1 at or below this many response tokens")
    g.add_argument("--len_max", type=int, default=64, help="len reward: falls linearly to 0 at this many tokens")
    g.add_argument("--reward_model_name_or_path", default=None,
                   help="sequence-classification reward model for the pref reward (MAESTRO skips pref with a warning "
                        "when unset; --reward_funcs pref refuses to start). credo's reading: loaded whole on every "
                        "rank, outside the actor's ZeRO-3 partitioning")


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
