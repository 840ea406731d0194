"""--episode_end: whether a verify-and-refine episode stops at its first success or plays every --max_turns turn.

TCPO's preservation and regression credit, and MT-GRPO's per-turn rewards, are about turns that come *after* a
solution, so their papers' protocol refines for a fixed number of turns; trajectory methods keep the cheaper
stop-at-success default. `auto` is resolved when the flags are parsed, so the run's config records the choice.
"""
EPISODE_END_CHOICES = ("auto", "success", "max_turns")


def resolve_episode_end(value: str, fixed_turns: bool) -> str:
    """`auto` -> max_turns for a method whose paper refines for a fixed number of turns (its Method.fixed_turns:
    tcpo, mt_grpo), success otherwise; an explicit value is kept."""
    if not isinstance(fixed_turns, bool):  # the old signature took the --algo name, which is always truthy
        raise TypeError(f"fixed_turns must be the method's bool Method.fixed_turns, got {fixed_turns!r}")
    if value == "auto":
        return "max_turns" if fixed_turns else "success"
    return value


def check_env_supports(args, env_cls, bad) -> None:
    """An explicit --episode_end max_turns on an env that ends its own episodes (AppWorld) is refused: it would
    silently change nothing. `auto` quietly leaves such an env its own end."""
    if args.episode_end_given == "max_turns" and not getattr(env_cls, "supports_episode_end", False):
        bad(f"--episode_end max_turns: --env {args.env} ends its episodes itself (it is not a verify-and-refine env); "
            "drop the flag")


def env_kwargs(episode_end: str, env_cls) -> dict:
    """What an env constructor gets for the episode end (the resolved --episode_end): only verify-and-refine envs
    take it (a user's Env with its own constructor is not handed a keyword it never asked for)."""
    if getattr(env_cls, "supports_episode_end", False):
        return {"episode_end": episode_end}
    return {}


def add_episode_flags(p, fixed_turn_methods: list, trajectory_methods: list):
    """The multi-turn flags. The two lists (--algo names whose Method.fixed_turns is set, and whose credit is per
    trajectory) only fill the help: this room sits below the methods and does not import them."""
    g = p.add_argument_group("rollout: multi-turn (verify and refine)")
    g.add_argument("--max_turns", type=int, default=1,
                   help="turns per episode: after a wrong answer the env gives feedback and the model tries again")
    g.add_argument("--episode_end", choices=EPISODE_END_CHOICES, default="auto",
                   help="verify-and-refine envs: end at the first success, or play every --max_turns turn (a correct "
                        "turn is told so and may keep or improve its answer); auto = max_turns for "
                        + " and ".join(fixed_turn_methods) + " (their papers' protocol), success otherwise")
    g.add_argument("--traj_score", choices=("final", "best"), default="final",
                   help="trajectory reward for trajectory-level methods (" + ", ".join(trajectory_methods)
                        + ") on multi-turn envs")


def validate_episodes(args, method, correctness: str, bad):
    """--max_turns against the method (its rl/methods/ class) and the rewards: a multi-turn episode is scored by the
    env's verifier (`correctness`, the --reward_funcs name of it) alone."""
    if args.max_turns < 1:
        bad(f"--max_turns must be >= 1, got {args.max_turns}")
    if method.turn_level and args.max_turns < 2:
        bad(f"--algo {args.algo} assigns credit to turns and needs --max_turns >= 2 (got {args.max_turns})")
    if args.max_turns > 1 and args.reward_funcs != [correctness]:
        bad("multi-turn episodes (--max_turns > 1) are scored by the env's verifier only; "
            f"drop --reward_funcs {','.join(args.reward_funcs)}")
