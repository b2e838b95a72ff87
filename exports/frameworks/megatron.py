"""The ``megatron`` export: a standard configuration as Megatron-LM's
command-line arguments, written as a bash array to add to a
``pretrain_gpt.py`` command line, after the environment the arguments
need: ``CUDA_DEVICE_MAX_CONNECTIONS=1`` with tensor or context parallelism
(Megatron-LM's ``validate_args`` requires it there, so that its
communication kernels are scheduled in the order it issues them).  The
file is meant to be sourced before the launch it names in a comment.

The argument names follow Megatron-LM's ``megatron/training/arguments.py``
of Megatron Core r0.15: ``--tensor-model-parallel-size``,
``--pipeline-model-parallel-size``, ``--context-parallel-size``,
``--expert-model-parallel-size``, ``--expert-tensor-parallel-size`` (where
the experts' tensor-parallel degree is not ``tp``: parallel folding),
``--sequence-parallel``,
``--micro-batch-size``, ``--global-batch-size``, ``--seq-length``,
``--recompute-granularity full|selective`` (full with ``--recompute-method
uniform --recompute-num-layers 1``: every layer recomputed; selective with
``--recompute-modules`` where the plan was costed with other modules than
the attention core),
``--use-distributed-optimizer``, ``--num-layers-per-virtual-pipeline-stage``,
``--pipeline-model-parallel-layout``, ``--bf16``, ``--fp16``,
``--tp-comm-overlap`` (a plan costed with ``--tp-overlap``), for a
mixture of experts ``--moe-grouped-gemm`` (the experts' products batched,
as the plan costs them) and ``--moe-token-dispatcher-type alltoall`` (or
``flex`` with ``--moe-flex-dispatcher-backend deepep``, a plan costed with
``--deepep``; Megatron Core's default, ``allgather``, moves the tokens
otherwise than the plan costs), and
Megatron-FSDP's ``--use-megatron-fsdp --data-parallel-sharding-strategy``
(releases before it named the switch ``--use-custom-fsdp``).

The ZeRO stages: 1 is the distributed optimizer; 2 and 3 are Megatron-FSDP
with the sharding strategies ``optim_grads`` and ``optim_grads_params``
(with the flags its guide requires: ``--use-distributed-optimizer``,
``--no-gradient-accumulation-fusion``, ``--ckpt-format fsdp_dtensor``).
Megatron derives the data-parallel degree from the world size.  Layers
split unevenly over the stages, or over the interleaved schedule's model
chunks, are written as a pipeline layout (``E`` the embedding, ``t`` a
layer, ``L`` the head, ``|`` between stages; with chunks, one stage per
virtual stage in the model's order, virtual stage ``k`` on rank ``k mod
pp``, from which Megatron-LM takes the virtual pipeline's size).

Refused, in one line: the GPipe schedule (Megatron-LM's pipelines are
1F1B, interleaved or not); an interleaved schedule whose micro-batches
are no multiple of ``pp`` (Megatron Core runs them in groups of ``pp``);
Megatron-FSDP (zero 2 and 3) with pipeline stages; tensor parallelism in
a mixture of experts without sequence parallelism (which Megatron-LM
requires together, expert parallelism or not); plans that are no standard
configuration.
"""

from __future__ import annotations

import shlex

from errors import InputError

FOLLOWS = ("Megatron-LM, Megatron Core r0.15 (megatron/training/arguments.py); checked with Megatron Core 0.16.1's "
           "configs")


def arguments(plan) -> tuple[list[str], list[str]]:
    """The arguments (one per line: a flag and its value) and the notes."""
    from exports.frameworks.common import layer_parts, standard_for
    from standard import has_experts

    std = standard_for(plan, "megatron")
    fail = "--export megatron: "
    if std.pp > 1 and std.schedule == "gpipe":
        raise InputError(fail + "Megatron-LM runs pipelines 1F1B (interleaved or not), not GPipe: give "
                         "schedule=1f1b or schedule=interleaved")
    if std.zero in (2, 3) and std.pp > 1:
        raise InputError(fail + f"zero={std.zero} is Megatron-FSDP, which does not run with pipeline stages "
                         f"(pp={std.pp})")
    if std.tp > 1 and not std.sp and has_experts(plan.graph):
        raise InputError(fail + "Megatron-LM requires sequence parallelism with tensor parallelism in a mixture of "
                         "experts (megatron/core/transformer/moe/moe_layer.py): give sp=1")
    m = plan.batch // (std.dp * std.microbatch)  # micro-batches a step
    if std.pp > 1 and std.schedule == "interleaved" and m % std.pp:
        unit = std.pp * std.dp * std.microbatch
        raise InputError(fail + f"Megatron-LM runs the interleaved schedule's micro-batches in groups of pp "
                         f"(microbatch_group_size_per_vp_stage) and refuses {m} micro-batches with pp={std.pp}: give "
                         f"a batch that is a multiple of {unit} (pp x dp x micro-batch)")
    args = [f"--tensor-model-parallel-size {std.tp}", f"--pipeline-model-parallel-size {std.pp}",
            f"--context-parallel-size {std.cp}", f"--expert-model-parallel-size {std.ep}"]
    if std.folded:  # parallel folding: Megatron-LM's default is the tensor-parallel size
        args.append(f"--expert-tensor-parallel-size {std.expert_tp}")
    if std.sp:
        args.append("--sequence-parallel")
    args += [f"--micro-batch-size {std.microbatch}", f"--global-batch-size {plan.batch}"]
    if plan.seq is not None:
        args.append(f"--seq-length {plan.seq}")
    if std.pp > 1:
        parts = layer_parts(plan, std, "megatron")  # in model order: a virtual stage's on rank k mod pp
        if std.schedule == "interleaved" and len(set(parts)) == 1:
            args.append(f"--num-layers-per-virtual-pipeline-stage {parts[0]}")
        elif len(set(parts)) > 1:
            stages = ["t" * n for n in parts]
            stages[0], stages[-1] = "E" + stages[0], stages[-1] + "L"
            args.append(f"--pipeline-model-parallel-layout {'|'.join(stages)}")
    if std.recompute == "full":
        args += ["--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1"]
    elif std.recompute == "selective":
        args.append("--recompute-granularity selective")
        if plan.framework is not None and plan.framework.modules_named:  # not the default, the attention core
            args.append(f"--recompute-modules {' '.join(plan.framework.recompute_modules)}")
    if std.zero == 1:
        args.append("--use-distributed-optimizer")
    elif std.zero in (2, 3):
        args += ["--use-megatron-fsdp",
                 f"--data-parallel-sharding-strategy {'optim_grads' if std.zero == 2 else 'optim_grads_params'}",
                 "--use-distributed-optimizer", "--no-gradient-accumulation-fusion", "--ckpt-format fsdp_dtensor"]
    if plan.precision in ("bf16", "fp16"):
        args.append(f"--{plan.precision}")
    fw = plan.framework
    if fw is not None and fw.tp_overlap and std.tp > 1 and std.sp:  # costed with the collectives pipelined
        args.append("--tp-comm-overlap")  # under the products (which needs sequence parallelism)
    if has_experts(plan.graph):  # the experts as the plan costs them: one grouped product, tokens sent all-to-all
        args.append("--moe-grouped-gemm")
        if fw is not None and fw.deepep:  # or through DeepEP, each token once to each node holding its experts
            args += ["--moe-token-dispatcher-type flex", "--moe-flex-dispatcher-backend deepep"]
        else:  # (Megatron Core's default dispatcher all-gathers the tokens instead)
            args.append("--moe-token-dispatcher-type alltoall")
    if fw is not None and fw.float8:  # the linear layers in FP8 through Transformer Engine
        args += ["--fp8-format hybrid", "--fp8-amax-history-len 1024", "--fp8-amax-compute-algo max"]
    notes = [f"the data-parallel degree, {std.dp}, is what the world size of {plan.procs} leaves: "
             f"{plan.procs} / (tp x pp x cp)"]
    if std.pp == 1 and m > 1:
        notes.append(f"{m} micro-batches accumulate into one step")
    notes.append("the model's own arguments (--num-layers, --hidden-size, ...) are not written here")
    parallel = _parallel_block(plan)
    if parallel:
        notes.append(f"Megatron-LM's layers run attention, then the feed-forward; {parallel}'s run them side by "
                     "side: the job trains another model than the plan costs")
    return args, notes


def _parallel_block(plan) -> str:
    """The family of a Hugging Face config whose layers run attention and
    feed-forward side by side ("" otherwise)."""
    from exports.frameworks.dtensor import decoder_config

    try:
        cfg = decoder_config(plan)
    except InputError:  # no Hugging Face config
        return ""
    return cfg.family if cfg.parallel else ""


def environment(std) -> dict[str, str]:
    """The environment variables the arguments need."""
    return {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if std.tp > 1 or std.cp > 1 else {}


def render(plan) -> str:
    from exports.frameworks.common import header_lines

    args, notes = arguments(plan)
    std = plan.standard("megatron")
    head = header_lines(plan, std, FOLLOWS)
    words = [" ".join(shlex.quote(w) for w in a.split(" ")) for a in args]  # each word, a layout's '|' quoted
    lines = [f"# Megatron-LM arguments: {head[0]}", *[f"# {line}" for line in head[1:] + notes],
             f'# run: torchrun --nnodes=N --nproc_per_node={plan.procs}/N pretrain_gpt.py "${{PASE_PARALLEL_ARGS[@]}}" '
             "(and the model's arguments)"]
    for name, value in environment(std).items():
        lines.append(f"export {name}={value}")
    lines += ["PASE_PARALLEL_ARGS=(", *[f"    {w}" for w in words], ")"]
    return "\n".join(lines) + "\n"
