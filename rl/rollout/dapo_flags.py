"""train.py flags of DAPO's sampling and length handling (Yu et al. 2025, arXiv 2503.14476) and their parse-time
checks (rl/config.py calls both): dynamic sampling (rl/rollout/dynamic_sampling.py), the soft overlong punishment and the
truncated-completion mask (rewards/overlong.py). Every one is off by default."""
from rl.rollout.dynamic_sampling import FILTER_METRICS

DEFAULT_MAX_ROUNDS = 10  # the DAPO recipe's max_num_gen_batches in verl


def add_dapo_flags(p):
    g = p.add_argument_group("DAPO: dynamic sampling and overlong shaping")
    g.add_argument("--filter_groups", action="store_true",
                   help="dynamic sampling (DAPO 3.2, verl's algorithm.filter_groups): drop prompt groups whose "
                        "responses all score the same (--filter_groups_metric) and draw more prompts, a whole "
                        "rollout round at a time, until every rank holds --per_device_generation_batch_size groups")
    g.add_argument("--filter_groups_metric", choices=FILTER_METRICS, default="reward",
                   help="what a group must vary in: reward = what the method's advantage reads (the scalar reward; "
                        "each component for gdpo and dara); correctness = the env verifier's score (verl's acc, the "
                        "DAPO recipe's choice)")
    g.add_argument("--filter_groups_max_rounds", type=int, default=DEFAULT_MAX_ROUNDS,
                   help="rollout rounds per step at most (verl's max_num_gen_batches; the DAPO recipe's 10); a step "
                        "that still lacks groups then stops the run with an error and a checkpoint of the state "
                        "before it, as verl does; 0 = no cap")
    g.add_argument("--overlong_buffer_len", type=int, default=0,
                   help="soft overlong punishment (DAPO 3.4, eq. 13; verl's overlong_buffer.len): a response longer "
                        "than --max_answer_seq_len minus this many tokens gets a reward falling linearly to "
                        "-(--overlong_penalty_factor) at --max_answer_seq_len, added to its scalar reward; 0 = off")
    g.add_argument("--overlong_penalty_factor", type=float, default=1.0,
                   help="scale of the overlong punishment (verl's overlong_buffer.penalty_factor; DAPO's 1.0)")
    g.add_argument("--mask_truncated_completions", action="store_true",
                   help="responses with no EOS within --max_answer_seq_len (any turn, on multi-turn envs) get zero "
                        "loss weight: their tokens leave the loss and its token count; they still count in their "
                        "group's reward statistics (TRL's mask_truncated_completions)")


def validate_dapo(args, method, bad):
    """The DAPO flags against each other, the method (rl/methods/ class `method`) and the episode length."""
    if args.filter_groups_max_rounds < 0:
        bad(f"--filter_groups_max_rounds must be >= 0 (0 = no cap), got {args.filter_groups_max_rounds}")
    if not args.filter_groups and (args.filter_groups_metric != "reward"
                                   or args.filter_groups_max_rounds != DEFAULT_MAX_ROUNDS):
        bad("--filter_groups_metric / --filter_groups_max_rounds are set but dynamic sampling is off: add "
            "--filter_groups")
    if args.filter_groups:
        if method.turn_level:
            bad(f"--filter_groups with --algo {args.algo}: its advantages are per turn, read from every turn's "
                "verifier score, so a group whose trajectory scores tie may still carry signal; dynamic sampling "
                "filters on one score per response and is refused here")
        if method.weighs_rewards_while_scoring():
            bad(f"--filter_groups with --algo {args.algo}: the method weighs each response's rewards while scoring "
                "and learns from the weights it drew (MAESTRO's Conductor); rounds whose groups are dropped would "
                "teach it from responses that never reach the update")
    if args.overlong_buffer_len < 0:
        bad(f"--overlong_buffer_len must be >= 0 (0 = off), got {args.overlong_buffer_len}")
    if args.overlong_penalty_factor < 0:
        bad(f"--overlong_penalty_factor must be >= 0, got {args.overlong_penalty_factor}")
    if args.overlong_buffer_len == 0:
        if args.overlong_penalty_factor != 1.0:
            bad("--overlong_penalty_factor is set but the overlong punishment is off: add --overlong_buffer_len")
        return
    if args.overlong_buffer_len > args.max_answer_seq_len:
        bad(f"--overlong_buffer_len {args.overlong_buffer_len} is longer than --max_answer_seq_len "
            f"{args.max_answer_seq_len}: every response would be punished; pick at most {args.max_answer_seq_len}")
    if args.max_turns > 1:
        bad("--overlong_buffer_len punishes a single response's length (DAPO's setting); with --max_turns > 1 each "
            "turn has its own --max_answer_seq_len budget: use --mask_truncated_completions instead")
    if method.min_rewards > 1:
        bad(f"--overlong_buffer_len with --algo {args.algo}: the penalty is added to the scalar reward, which "
            f"{args.algo} does not read (it normalises each reward component on its own); use a length reward in "
            "--reward_funcs instead")
