"""The ``torchtitan`` export: a standard configuration as torchtitan 0.3's
command line, a bash array ``PASE_TORCHTITAN_ARGS`` to give to
``torchrun ... -m torchtitan.train``.

torchtitan 0.3 runs a job as a named model and config (``--module``,
``--config``: a function of the module's ``config_registry``) with
command-line overrides of its fields (``--section.field value``, parsed by
tyro; ``torchtitan/config/manager.py``), the activation checkpointing a
subcommand (``activation-checkpoint:none|full|selective``).  The export
names:

* the model: Llama 3 at torchtitan's sizes (8B, 70B, 405B) as its own
  ``--module llama3 --config llama3_8b`` (``_70b``, ``_405b``); any other
  Hugging Face config as torchtitan's transformers backend,
  ``--module transformers_modeling_backend --config
  transformers_modeling_backend_full`` (``_full_moe`` for a mixture of
  experts) with ``--hf_model`` the config's directory;
* ``--training.local_batch_size`` (per data-parallel rank),
  ``global_batch_size``, ``seq_len``, ``mixed_precision_param``;
* ``--parallelism.data_parallel_replicate_degree`` (ZeRO 0) or
  ``data_parallel_shard_degree`` (ZeRO 3: FSDP), ``tensor_parallel_degree``,
  ``enable_sequence_parallel`` (or ``no_``), ``context_parallel_degree``,
  ``expert_parallel_degree``, and for a pipeline
  ``pipeline_parallel_degree``, ``pipeline_parallel_schedule``,
  ``pipeline_parallel_microbatch_size`` and ``module_fqns_per_model_part``
  (``tok_embeddings``, ``layers.i``, ``norm``, ``lm_head``; the transformers
  backend's parts each carry ``rotary_emb``), with
  ``--training.disable_cuda_graphs`` (torchtitan's CUDA graphs do not run
  pipelines);
* ``--compile.enable_async_tensor_parallel`` where the plan was costed
  with ``--tp-overlap`` (its collectives pipelined under the products;
  under ``compile``), else ``--compile.no_enable_async_tensor_parallel``.

Refused, in one line: a model that is no Hugging Face config (torchtitan
names no built-in graph of this tool: ``--export torchtitan@0.2`` writes
the parallelism sections alone); ZeRO stages 1 and 2; expert parallelism
without FSDP (``zero=3``: torchtitan's experts borrow the FSDP ranks), or
with the experts split by tensor parallelism (torchtitan 0.3 runs the
experts without, over ranks borrowed from ``dp_shard x cp x tp``: the
plan's ``etp=1``, under sequence parallelism), and experts of their own
tensor-parallel degree without expert parallelism (torchtitan then splits
them ``tp`` ways); fp16; plans
that are no standard configuration; families whose projections the
transformers backend cannot shard (``common.UNSHARDED``: Phi-3's fused q/k/v
and gate/up, GLM's fused gate/up, GPT-NeoX's fused q/k/v, StarCoder 2's
c_fc and c_proj).  Noted in the file: the backend unties tied
embeddings and drops the biases ``attention_bias`` and ``mlp_bias`` switch
on (:func:`backend_changes`).
"""

from __future__ import annotations

import os
import shlex

from errors import InputError
from exports.frameworks.common import UNSHARDED

FOLLOWS = "torchtitan 0.3 (torchtitan/config/configs.py, torchtitan/config/manager.py)"
SCHEDULES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "Interleaved1F1B"}
PRECISION = {"bf16": "bfloat16", "fp32": "float32"}
FAIL = "--export torchtitan: "
#: the config keys of the biases the transformers backend switches off (it sets attention_bias and mlp_bias False)
DROPPED_BIASES = ("attention_bias", "mlp_bias")
#: torchtitan's own Llama 3 configs: (width, layers, heads, key/value heads, feed-forward, vocabulary)
LLAMA3 = {(4096, 32, 32, 8, 14336, 128256): "llama3_8b", (8192, 80, 64, 8, 28672, 128256): "llama3_70b",
          (16384, 126, 128, 8, 53248, 128256): "llama3_405b"}


def model_args(plan) -> tuple[list, object]:
    """``--module``, ``--config`` (and ``--hf_model``) of the plan's model,
    and where it runs on the transformers backend its
    :class:`models.hf_config.DecoderConfig` (``None`` for torchtitan's own
    Llama 3)."""
    from exports.frameworks.dtensor import decoder_config

    try:
        cfg = decoder_config(plan)
    except InputError:
        raise InputError(FAIL + f"{plan.model_name} is no Hugging Face config, and torchtitan 0.3 runs a model "
                         "it names (--module): export a config.json, or write the parallelism sections alone with "
                         "--export torchtitan@0.2") from None
    if cfg.family in UNSHARDED:
        raise InputError(FAIL + f"torchtitan 0.3's transformers backend shards q_proj, k_proj, v_proj and gate_proj "
                         f"or fc1, which {cfg.family} has not ({UNSHARDED[cfg.family]}): export it with --export jax")
    key = (cfg.width, cfg.layers, cfg.heads, cfg.kv_heads, cfg.ffn, cfg.vocab)
    if cfg.family == "llama" and key in LLAMA3:
        return ["--module llama3", f"--config {LLAMA3[key]}"], None
    from models.sources import locate

    folder = os.path.dirname(os.path.abspath(locate(plan.settings.graph)[1]))
    config = "transformers_modeling_backend_full" + ("_moe" if cfg.experts else "")
    return ["--module transformers_modeling_backend", f"--config {config}", ("--hf_model", folder)], cfg


def backend_changes(cfg) -> list[str]:
    """Notes on how torchtitan 0.3's transformers backend builds the model
    otherwise than the plan costs it: it unties tied embeddings (FSDP2
    shards no weight two modules share: parallelize.py) and builds the
    attention and feed-forward layers without the biases that
    ``attention_bias`` and ``mlp_bias`` switch on (model.py sets both
    False); ``cfg`` the model's :class:`models.hf_config.DecoderConfig`."""
    from models.hf_families import FAMILIES

    notes = []
    if cfg.tied:
        notes.append(f"the backend unties the embedding and the head: the job trains {cfg.vocab * cfg.width:,} "
                     "more parameters than the plan costs (a second vocabulary x width matrix)")
    parts = FAMILIES[cfg.family]
    dropped = sorted({key for key, on in ((parts.qkv_bias, cfg.qkv_bias), (parts.out_bias, cfg.out_bias),
                                          (parts.mlp_bias, cfg.mlp_bias)) if on and key in DROPPED_BIASES})
    if dropped:
        notes.append(f"the backend builds the model with {' and '.join(dropped)} off: without the biases the plan "
                     "costs")
    return notes


def _parts(plan, std, backend: bool) -> list[str]:
    """``module_fqns_per_model_part``: each part's modules, comma-joined
    (the transformers backend's rotary embedding in every part)."""
    from exports.frameworks.common import part_modules

    return [",".join(names + ["rotary_emb"] * backend) for names in part_modules(plan, std, "torchtitan", "lm_head")]


def arguments(plan) -> tuple[list[str], list[str]]:
    """The arguments (a flag and its values per item: a string of words, or
    a tuple of words that may hold spaces) and the notes."""
    from exports.frameworks.common import async_tp, fsdp_zero, standard_for

    std = standard_for(plan, "torchtitan")
    fsdp_zero(std, FAIL)
    if std.ep > 1 and std.zero != 3:
        raise InputError(FAIL + f"ep={std.ep}: torchtitan's experts borrow the FSDP ranks "
                         "(data_parallel_shard_degree): give zero=3")
    if std.ep > 1 and std.tp > 1 and (std.expert_tp != 1 or not std.sp):
        why = f"etp={std.expert_tp}" if std.expert_tp != 1 else "sp=0"
        raise InputError(FAIL + f"ep={std.ep} with tp={std.tp} and {why}: torchtitan 0.3 runs the experts without "
                         "tensor parallelism, over ranks borrowed from dp_shard x cp x tp, the tokens split over the "
                         "tensor-parallel ranks as sequence parallelism splits them: give etp=1 and sp=1")
    if std.ep == 1 and std.folded:
        raise InputError(FAIL + f"etp={std.etp} with ep=1: torchtitan 0.3 splits the experts by the tensor-parallel "
                         f"degree without expert parallelism: give etp={std.tp}, or ep > 1")
    if plan.precision == "fp16":
        raise InputError(FAIL + "fp16: torchtitan's mixed precision is bfloat16 or float32")
    fw = plan.framework
    if fw is not None and fw.float8:
        raise InputError(FAIL + "--float8: torchtitan 0.3 turns Float8 on in a config function's model converters "
                         "(Float8LinearConverter), which command-line overrides cannot set; export with "
                         "torchtitan@0.2 (its TOML has them) or cost the plan without --float8")
    args, backend = model_args(plan)  # backend: the model's config, on the transformers backend
    notes = []
    args += [f"--training.local_batch_size {plan.batch // std.dp if std.pp > 1 else std.microbatch}",
             f"--training.global_batch_size {plan.batch}"]
    if plan.seq is not None:
        args.append(f"--training.seq_len {plan.seq}")
    if plan.precision in PRECISION:
        args.append(f"--training.mixed_precision_param {PRECISION[plan.precision]}")
    args += [f"--parallelism.data_parallel_replicate_degree {1 if std.zero == 3 else std.dp}",
             f"--parallelism.data_parallel_shard_degree {std.dp if std.zero == 3 else 1}",
             f"--parallelism.tensor_parallel_degree {std.tp}",
             f"--parallelism.{'' if std.sp else 'no_'}enable_sequence_parallel",
             f"--parallelism.context_parallel_degree {std.cp}",
             f"--parallelism.expert_parallel_degree {std.ep}",
             f"--parallelism.pipeline_parallel_degree {std.pp}"]
    if std.pp > 1:
        args += [f"--parallelism.pipeline_parallel_schedule {SCHEDULES[std.schedule]}",
                 f"--parallelism.pipeline_parallel_microbatch_size {std.microbatch}",
                 ("--parallelism.module_fqns_per_model_part", *_parts(plan, std, backend is not None)),
                 "--training.disable_cuda_graphs"]
    if fw is not None and fw.compiled:  # costed with torch.compile's fused kernels: the job compiles too
        # the loss compiled too where the profile costs it so (today's torchtitan; December 2024's ran it eagerly)
        args += ["--compile.enable", f"--compile.components {'model,loss' if fw.loss_compiled else 'model'}"]
    overlap = async_tp(plan, std, notes)
    args.append(f"--compile.{'' if overlap else 'no_'}enable_async_tensor_parallel")
    if std.pp == 1 and std.microbatch * std.dp < plan.batch:
        notes.append(f"{plan.batch // (std.microbatch * std.dp)} micro-batches accumulate into one step "
                     "(global_batch_size over local_batch_size x data-parallel degree)")
    if std.recompute == "selective":
        notes.append("recompute=selective was costed as Megatron-LM's (the attention recomputed); torchtitan's "
                     "selective policy chooses its own operators")
    if backend is not None:
        notes.append("the transformers backend reads the model from --hf_model; give --hf_assets_path for its "
                     "tokenizer")
        notes += backend_changes(backend)
    args.append(f"activation-checkpoint:{std.recompute}")
    return args, notes


def render(plan) -> str:
    from exports.frameworks.common import header_lines

    args, notes = arguments(plan)
    std = plan.standard("torchtitan")
    head = header_lines(plan, std, FOLLOWS)
    nodes = f"--nnodes=N --nproc_per_node={plan.procs}/N"
    words = [" ".join(shlex.quote(w) for w in (a.split(" ") if isinstance(a, str) else a)) for a in args]
    lines = [f"# torchtitan job: {head[0]}", *[f"# {line}" for line in head[1:] + notes],
             f'# run: torchrun {nodes} -m torchtitan.train "${{PASE_TORCHTITAN_ARGS[@]}}"',
             "PASE_TORCHTITAN_ARGS=(", *[f"    {w}" for w in words], ")"]
    return "\n".join(lines) + "\n"
