"""The ``dtensor`` export: a standard configuration as a PyTorch plan for
the ``transformers`` model class of a Hugging Face config (JSON), which
:mod:`exports.torch_apply` applies to the model.

The plan names the model's own modules (``model.layers.*.self_attn.q_proj``
of ``LlamaForCausalLM``; ``*`` any layer, as ``parallelize_module`` reads
it) and holds:

* ``mesh``: the ``DeviceMesh`` dimensions, outermost first: ``pp``;
  ``dp_replicate`` and ``dp_shard`` (the data-parallel degree is the
  first's under ZeRO stage 0, the second's under stage 3, the other of
  size 1: FSDP2's HSDP mesh); ``cp``; ``tp``.  ``init_device_mesh`` builds
  it for the device type the caller gives.
* ``tensor_parallel``: the ``parallelize_module`` plan on ``tp``, as the
  cost model splits each operator: q, k, v and the gate and up
  projections ``ColwiseParallel`` (the heads, the key/value heads and the
  feed-forward units split), the output and down projections
  ``RowwiseParallel``, the embedding ``RowwiseParallel`` over the
  vocabulary, the head ``ColwiseParallel`` with its logits left split over
  the vocabulary for the loss (``loss_parallel``); with sequence
  parallelism the norms ``SequenceParallel``, the residual stream split
  over the sequence (``Shard(1)``), the attention and the feed-forward
  block gathering it (``PrepareModuleInput``).  Mixtral's stacked experts
  (``mlp.experts``) take ``ExpertsTensorParallel``: each expert's hidden
  units split ``tp`` ways (:mod:`exports.torch_apply`; no other experts'
  tensor-parallel degree, ``etp``).
* ``data_parallel``: ``fully_shard`` of each decoder layer
  (``model.layers.{i}``) and then of the whole model, on the ``dp_shard``
  (ZeRO stage 3: FSDP) or ``dp_replicate`` (stage 0: replicated, the
  gradients all-reduced) dimension; FSDP shards each parameter's first
  dimension as the model stores it (out-features, experts).
* ``context_parallel``: the mesh dimension and the sequence dimension of
  the buffers ``torch.distributed.tensor.experimental.context_parallel``
  shards (PyTorch's ring attention, which runs on CUDA devices).
* ``pipeline``: the schedule (``torch.distributed.pipelining``), micro-batches,
  split points (the first layer of each stage but the first) and per
  stage its ``pp`` rank and layers, as the plan's stages hold them.
* ``activation_checkpointing``: ``full`` recomputes each decoder layer
  (``transformers``' ``gradient_checkpointing_enable``).

The plan follows ``torch.distributed`` of PyTorch 2.6 and later
(``DeviceMesh``, ``tensor.parallel``, ``fsdp.fully_shard``,
``pipelining``) and the module names of ``transformers`` 5 (Llama, Mistral
and Qwen2 have had them since 4.x; Mixtral's experts stacked in one tensor
per projection are 5's); it was run with torch 2.13.0 and transformers
5.24.0.

Refused, in one line: a model that is no Hugging Face config of a family
whose class this names (built-in graphs and ONNX files: ``--export jax``);
GPT-2 with tensor parallelism or pipeline stages (its attention is one
``Conv1D`` fusing q, k and v); expert parallelism (no PyTorch parallel
style sends tokens to experts on other devices); ZeRO stages 1 and 2
(optimizer sharding, which ``fully_shard`` does not do apart from the
weights); ``zero=0`` with context parallelism (PyTorch shards the
parameters over the data- and context-parallel devices together, as
torchtitan does); pipeline stages with tied embeddings; plans that are no
standard configuration.
"""

from __future__ import annotations

import json

from errors import InputError

FOLLOWS = ("PyTorch torch.distributed (DeviceMesh, tensor.parallel, fsdp.fully_shard, pipelining) 2.6 and later, "
           "transformers module names; run with torch 2.13.0 and transformers 5.24.0")
FORMAT = "pase-torch-plan"
VERSION = 2
CLASSES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
           "mixtral": "MixtralForCausalLM", "gpt2": "GPT2LMHeadModel"}
SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved": "ScheduleInterleaved1F1B"}
FAIL = "--export dtensor: "


def decoder_config(plan):
    """The :class:`models.hf_config.DecoderConfig` of the plan's model, or
    a one-line refusal for a model that is no Hugging Face config."""
    from models.registry import MODELS

    name = plan.settings.graph
    if name not in MODELS:
        from models.sources import locate

        kind, path = locate(name)
        if kind == "config":
            from models.hf_config import read_config

            return read_config(path)
    raise InputError(FAIL + f"{plan.model_name} is no Hugging Face config: the plan names the modules of a "
                     "transformers model class (Llama, Mistral, Qwen2, Mixtral, GPT-2); export it with --export jax")


def mesh_dims(std) -> list[tuple[str, int]]:
    """(name, size) of the mesh's dimensions, outermost first."""
    dims = [("pp", std.pp)] if std.pp > 1 else []
    dims += [("dp_replicate", 1 if std.zero == 3 else std.dp), ("dp_shard", std.dp if std.zero == 3 else 1)]
    dims += [(n, s) for n, s in (("cp", std.cp), ("tp", std.tp)) if s > 1]
    return dims


def _style(style: str, **kw) -> dict:
    return {"style": style, **kw}


def tensor_plan(cfg, std) -> dict:
    """The ``parallelize_module`` plan of a Llama-like model (see the
    module docstring)."""
    sp = bool(std.sp)
    seq = "Shard(1)"
    lay = "model.layers.*."
    plan = {"model.embed_tokens": _style("RowwiseParallel", input_layouts="Replicate()",
                                         output_layouts=seq if sp else "Replicate()", use_local_output=not sp)}
    if sp:
        plan[lay + "input_layernorm"] = _style("SequenceParallel")
        plan[lay + "self_attn"] = _style("PrepareModuleInput", input_kwarg_layouts={"hidden_states": seq},
                                         desired_input_kwarg_layouts={"hidden_states": "Replicate()"})
    for name in ("q_proj", "k_proj", "v_proj"):
        plan[lay + "self_attn." + name] = _style("ColwiseParallel")
    plan[lay + "self_attn.o_proj"] = _style("RowwiseParallel", output_layouts=seq if sp else "Replicate()",
                                            use_local_output=not sp)
    if sp:
        plan[lay + "post_attention_layernorm"] = _style("SequenceParallel")
    if cfg.experts:
        plan[lay + "mlp"] = _style("PrepareModuleInputOutput", input_layouts=[seq if sp else "Replicate()"],
                                   desired_input_layouts=["Replicate()"], use_local_input=True,
                                   output_layouts=["Partial()"], desired_output_layouts=[seq if sp else "Replicate()"],
                                   use_local_output=not sp)
        plan[lay + "mlp.experts"] = _style("ExpertsTensorParallel")
    else:
        if sp:
            plan[lay + "mlp"] = _style("PrepareModuleInput", input_layouts=[seq], desired_input_layouts=["Replicate()"])
        plan[lay + "mlp.gate_proj"] = _style("ColwiseParallel")
        plan[lay + "mlp.up_proj"] = _style("ColwiseParallel")
        plan[lay + "mlp.down_proj"] = _style("RowwiseParallel", output_layouts=seq if sp else "Replicate()",
                                             use_local_output=not sp)
    if sp:
        plan["model.norm"] = _style("SequenceParallel")
    plan["lm_head"] = _style("ColwiseParallel", input_layouts=seq if sp else "Replicate()", output_layouts="Shard(-1)",
                             use_local_output=False)
    return plan


def _checks(cfg, std, plan):
    if cfg.family not in CLASSES:
        from exports.frameworks.common import UNSHARDED

        other = "--export jax" + ("" if cfg.family in UNSHARDED else " or --export torchtitan")
        raise InputError(FAIL + f"the plan names the modules of a transformers class of Llama, Mistral, Qwen2, "
                         f"Mixtral or GPT-2, not of {cfg.family}: export it with {other}")
    if std.zero in (1, 2):
        raise InputError(FAIL + f"zero={std.zero} shards the optimizer's state"
                         f"{' and the gradients' if std.zero == 2 else ''} but not the weights, which fully_shard "
                         "does not do (zero=0 replicates, zero=3 is FSDP)")
    if std.ep > 1:
        raise InputError(FAIL + f"ep={std.ep}: no PyTorch parallel style sends tokens to experts on other devices "
                         "(give ep=1: the experts split by tensor parallelism, or export to torchtitan)")
    if std.folded:
        raise InputError(FAIL + f"etp={std.etp}: ExpertsTensorParallel splits the experts by the tensor-parallel "
                         f"degree ({std.tp}): give etp={std.tp}, or export to torchtitan or megatron")
    if cfg.gpt2 and (std.tp > 1 or std.pp > 1):
        raise InputError(FAIL + "GPT-2's attention is one Conv1D fusing q, k and v (c_attn), which tensor "
                         "parallelism and these pipeline stages do not split: give tp=1 and pp=1")
    if std.cp > 1 and std.zero != 3:
        raise InputError(FAIL + f"cp={std.cp}: PyTorch shards the parameters over the data- and context-parallel "
                         "devices together (fully_shard), as torchtitan does: give zero=3")
    if std.pp > 1 and cfg.tied:
        raise InputError(FAIL + f"{plan.model_name} ties its embedding and head, which pipeline stages hold apart: "
                         "give pp=1")


def _pipeline(plan, std, cfg) -> dict:
    from exports.frameworks.common import layer_parts

    parts = layer_parts(plan, std, "dtensor")
    stages, first = [], 0
    for k, n in enumerate(parts):
        stages.append({"stage": k, "rank": k % std.pp, "layers": list(range(first, first + n))})
        first += n
    return {"mesh_dim": "pp", "schedule": SCHEDULES[std.schedule], "microbatch_size": std.microbatch,
            "microbatches": plan.batch // (std.dp * std.microbatch),
            "split_points": [f"model.layers.{s['layers'][0]}" for s in stages[1:]], "stages": stages}


def document(plan) -> dict:
    from exports.frameworks.common import standard_for

    std = standard_for(plan, "dtensor")
    cfg = decoder_config(plan)
    _checks(cfg, std, plan)
    dims = mesh_dims(std)
    layers = "transformer.h" if cfg.gpt2 else "model.layers"
    tp = None
    if std.tp > 1:
        tp = {"mesh_dim": "tp", "sequence_parallel": bool(std.sp), "loss_parallel": True,
              "plan": tensor_plan(cfg, std)}
    dp = None
    if std.dp * std.cp > 1:
        dp = {"zero": std.zero, "shard": ["dp_shard"] + (["cp"] if std.cp > 1 else []), "replicate": ["dp_replicate"],
              "fully_shard": [f"{layers}.{i}" for i in range(cfg.layers)], "reshard_after_forward": True}
    doc = {
        "format": FORMAT, "version": VERSION, "api": FOLLOWS, "model": plan.model_name, "family": cfg.family,
        "model_class": CLASSES[cfg.family], "procs": plan.procs, "plan": f"standard configuration {std.describe()}",
        "standard": {"tp": std.tp, "dp": std.dp, "cp": std.cp, "ep": std.ep, "sp": std.sp, "pp": std.pp,
                     "microbatch": std.microbatch, "schedule": std.schedule if std.pp > 1 else None,
                     "recompute": std.recompute, "zero": std.zero},
        "batch": plan.batch, "seq": plan.seq,
        "mesh": {"dim_names": [n for n, _ in dims], "shape": [s for _, s in dims]},
        "tensor_parallel": tp, "data_parallel": dp,
        "context_parallel": {"mesh_dim": "cp", "buffer_seq_dims": {"input_ids": 1, "labels": 1}}
        if std.cp > 1 else None,
        "pipeline": _pipeline(plan, std, cfg) if std.pp > 1 else None,
        "activation_checkpointing": None if std.recompute == "none" else {
            "mode": std.recompute, "modules": f"{layers}.*",
            "applied": std.recompute == "full"},
    }
    return doc


def _lines(value, depth: int) -> str:
    """``value`` as JSON: a dict of dicts (or a dict holding the plan) one
    key per line, anything else on one line."""
    if isinstance(value, dict) and value and depth < 3 and any(isinstance(v, dict) for v in value.values()):
        pad = " " * depth
        body = ",\n".join(f"{pad} {json.dumps(k)}: {_lines(v, depth + 1)}" for k, v in value.items())
        return "{\n" + body + "\n" + pad + "}"
    return json.dumps(value)


def render(plan) -> str:
    return _lines(document(plan), 0) + "\n"
