"""The ``torchtitan@0.2`` export: a standard configuration as the sections
of a torchtitan 0.2 job config (TOML) that say how to parallelise
(torchtitan 0.3 reads no TOML: ``--export torchtitan`` writes its
command line).

The keys follow torchtitan v0.2 (``torchtitan/config/job_config.py``):
``[training]`` ``local_batch_size`` (per
data-parallel rank), ``global_batch_size``, ``seq_len``,
``mixed_precision_param``; ``[parallelism]`` ``data_parallel_replicate_degree``,
``data_parallel_shard_degree``, ``tensor_parallel_degree``,
``enable_async_tensor_parallel``, ``context_parallel_degree``,
``expert_parallel_degree``, ``expert_tensor_parallel_degree``,
``pipeline_parallel_degree``, ``pipeline_parallel_schedule``,
``pipeline_parallel_microbatch_size``, ``module_fqns_per_model_part``;
``[activation_checkpoint]`` ``mode`` and ``selective_ac_option``.

The mapping: ZeRO stage 3 is FSDP (``data_parallel_shard_degree = dp``),
ZeRO 0 is replication (``data_parallel_replicate_degree = dp``); expert
parallelism is torchtitan's "dp2ep" (carved out of the FSDP degree and
the context-parallel ranks, and with ``etp=1`` the tensor-parallel ranks
too); the
pipeline's stages are written as the model parts of torchtitan's decoders
(``tok_embeddings``, ``layers.i``, ``norm``, ``output``), the first holding
the embedding and the last the head, as the cost model lays them out.

Refused, in one line: ZeRO stages 1 and 2 (torchtitan shards the
optimizer state only together with the weights, by FSDP); expert
parallelism without FSDP, with an experts' tensor-parallel degree other
than ``tp`` or 1, or an ``ep`` that does not take every context-parallel
(and with ``etp=1`` tensor-parallel) rank, as torchtitan's
``ParallelDims`` requires, or without expert parallelism (torchtitan
then splits the experts ``tp`` ways); fp16 training
(torchtitan's mixed precision is bfloat16 or float32); plans that are no
standard configuration.  torchtitan runs tensor parallelism with the
norms sequence-parallel: a plan costed with ``sp=0`` says so in a comment.
"""

from __future__ import annotations

from errors import InputError
from exports.frameworks.common import async_tp, part_modules

FOLLOWS = "torchtitan v0.2 (torchtitan/config/job_config.py)"
SCHEDULES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "Interleaved1F1B"}
PRECISION = {"bf16": "bfloat16", "fp32": "float32"}


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)


def sections(plan) -> tuple[dict, list[str]]:
    """The TOML tables ({table: {key: value}}) and the notes for ``plan``."""
    from exports.frameworks.common import fsdp_zero, standard_for

    std = standard_for(plan, "torchtitan@0.2")
    fail = "--export torchtitan@0.2: "
    fsdp_zero(std, fail)
    if std.ep > 1 and std.zero != 3:
        raise InputError(fail + f"ep={std.ep}: torchtitan carves expert parallelism out of the FSDP degree "
                         "(data_parallel_shard_degree): give zero=3")
    if std.ep > 1 and std.expert_tp not in (1, std.tp):
        raise InputError(fail + f"etp={std.expert_tp}: torchtitan's experts take the tensor-parallel degree or 1")
    if std.ep == 1 and std.folded:
        raise InputError(fail + f"etp={std.etp} with ep=1: without expert parallelism torchtitan splits the experts "
                         f"by the tensor-parallel degree: give etp={std.tp}, or ep > 1")
    borrowed = std.cp * (std.tp if std.expert_tp == 1 else 1)
    if std.ep > 1 and std.ep % borrowed:
        raise InputError(fail + f"ep={std.ep}: torchtitan's expert parallelism takes every context-parallel"
                         f"{' and tensor-parallel' if std.expert_tp == 1 < std.tp else ''} rank ({borrowed}), "
                         "then some of the FSDP degree: give an ep that they divide")
    if plan.precision == "fp16":
        raise InputError(fail + "fp16: torchtitan's mixed precision is bfloat16 or float32")
    notes = []
    training = {"local_batch_size": plan.batch // std.dp if std.pp > 1 else std.microbatch,
                "global_batch_size": plan.batch}
    if plan.seq is not None:
        training["seq_len"] = plan.seq
    if plan.precision in PRECISION:
        training["mixed_precision_param"] = PRECISION[plan.precision]
    par = {"data_parallel_replicate_degree": 1 if std.zero == 3 else std.dp,
           "data_parallel_shard_degree": std.dp if std.zero == 3 else 1,
           "tensor_parallel_degree": std.tp,
           "enable_async_tensor_parallel": async_tp(plan, std, notes),
           "context_parallel_degree": std.cp, "expert_parallel_degree": std.ep}
    if std.ep > 1:
        par["expert_tensor_parallel_degree"] = std.expert_tp
    par["pipeline_parallel_degree"] = std.pp
    if std.pp > 1:
        par["pipeline_parallel_schedule"] = SCHEDULES[std.schedule]
        par["pipeline_parallel_microbatch_size"] = std.microbatch
        par["module_fqns_per_model_part"] = part_modules(plan, std, "torchtitan@0.2", "output")
    if std.tp > 1 and not std.sp:
        notes.append("torchtitan runs the norms sequence-parallel under tensor parallelism; the plan was costed "
                     "without (sp=0)")
    if std.pp == 1 and std.microbatch * std.dp < plan.batch:
        notes.append(f"{plan.batch // (std.microbatch * std.dp)} micro-batches accumulate into one step "
                     "(global_batch_size over local_batch_size x data-parallel degree)")
    ac = {"mode": std.recompute}
    if std.recompute == "selective":
        ac["selective_ac_option"] = "op"
        notes.append("recompute=selective was costed as Megatron-LM's (the attention recomputed); torchtitan's "
                     "op-level policy chooses its own operators")
    tables = {"training": training, "parallelism": par, "activation_checkpoint": ac}
    fw = plan.framework
    if fw is not None and fw.compiled:  # costed with torch.compile's fused kernels: the job compiles too
        tables["compile"] = {"enable": True, "components": ["model", "loss"] if fw.loss_compiled else ["model"]}
    if fw is not None and fw.float8:  # the linear layers in Float8 (torchao), their FSDP gathers too
        tables["model"] = {"converters": ["float8"]}
        tables["float8"] = {"enable_fsdp_float8_all_gather": std.zero == 3, "filter_fqns": ["output"]}
    return tables, notes


def render(plan) -> str:
    from exports.frameworks.common import header_lines

    tables, notes = sections(plan)
    std = plan.standard("torchtitan@0.2")
    head = header_lines(plan, std, FOLLOWS)
    lines = [f"# {line}" for line in ["torchtitan job config, parallelism sections: " + head[0], *head[1:], *notes]]
    for table, keys in tables.items():
        lines += ["", f"[{table}]"] + [f"{k} = {_toml(v)}" for k, v in keys.items()]
    return "\n".join(lines) + "\n"
