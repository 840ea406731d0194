"""ZeRO-3's parameter knobs for the actor and reference, by world size.

Several ranks: DeepSpeed-Chat's partitioning (small parameters persist, the rest are gathered layer by layer).

One rank: there is nothing to partition across, yet with those knobs ZeRO-3 still all-gathers (allocates a full
tensor and copies its one partition in) every layer's weights in each micro-batch's forward, frees them, and gathers
them again in backward. Marking every parameter persistent (DeepSpeed's `stage3_param_persistence_threshold`
above the largest parameter) keeps them gathered: DeepSpeed then gathers once per optimizer step (stage3.py
`_post_step`), which is what "gather once per update" means for training. The step is the same maths: ZeRO-3 on
one rank holds one full partition either way. What this cannot remove is ZeRO-3's gradient path, which copies each
micro-batch's gradients into the reduce bucket, averages them and adds them into the fp32 partition (stage3.py
`__add_grad_to_ipg_bucket`, `__avg_scatter_contiguous_grads`, `partition_grads`) where stage 0 lets autograd
accumulate in place; DeepSpeed has no `no_sync` for ZeRO-2/3. Counted on a tiny Llama (elements written by copy_,
cat, div_ and add ops per parameter, one update of 4 micro-batches): 31.6 at stage 0, 49.8 at stage 3, that is about
4.5 extra full-gradient writes per micro-batch (2.4 GB for SmolLM2-135M in fp32). That is why one process defaults
to stage 0 (default_zero_stage).
"""
import sys

# DeepSpeed-Chat's get_train_ds_config values for stage 3 (utils/ds_utils.py), kept for several ranks.
MULTI_RANK_ZERO3 = {"stage3_param_persistence_threshold": 1e4, "stage3_max_live_parameters": 3e7,
                    "stage3_prefetch_bucket_size": 3e7}
# credo's reading for one rank: every parameter persistent (the threshold is a parameter count, compared with each
# parameter's numel); the model-wide persistence cap is DeepSpeed's own default (sys.maxsize).
ONE_RANK_ZERO3 = {"stage3_param_persistence_threshold": sys.maxsize, "stage3_max_live_parameters": 3e7,
                  "stage3_prefetch_bucket_size": 3e7}


def zero3_parameter_knobs(world_size: int) -> dict:
    """The stage-3 parameter knobs of the DeepSpeed config's zero_optimization block."""
    return dict(ONE_RANK_ZERO3 if world_size == 1 else MULTI_RANK_ZERO3)


def default_zero_stage(world_size: int, offload: bool) -> int:
    """--actor_zero_stage's default: 0 in one process, as DeepSpeed-Chat's single_gpu scripts run (step 3,
    training_scripts/*/single_gpu: ACTOR_ZERO_STAGE=0), 3 on several ranks (its multi-GPU scripts' stage) or with
    --offload (which needs a partitioned stage). One-rank ZeRO-3 computes the same steps but pays its gradient path
    (module docstring)."""
    return 3 if world_size > 1 or offload else 0


def resolve_zero_stage(args, environ=None) -> None:
    """Fill an unset --actor_zero_stage from the launcher's WORLD_SIZE (1 under plain python)."""
    import os
    if args.actor_zero_stage is None:
        world_size = int((environ if environ is not None else os.environ).get("WORLD_SIZE", "1"))
        args.actor_zero_stage = default_zero_stage(world_size, bool(args.offload))
