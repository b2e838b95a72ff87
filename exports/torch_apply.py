"""Apply a ``--export dtensor`` plan to a Hugging Face ``transformers``
model: the device mesh, tensor and sequence parallelism
(``parallelize_module``), FSDP2 (``fully_shard``) or replication, and the
pipeline stage of this rank.

    >>> from exports import torch_apply                               # doctest: +SKIP
    >>> plan = torch_apply.load("plan.json")                          # no torch needed to read it
    >>> mesh = plan.device_mesh("cuda")                               # the device type is yours to give
    >>> model = torch_apply.apply(model, plan, mesh)                  # TP/SP, then FSDP or replication
    >>> with plan.loss_parallel():                                    # the loss over a split vocabulary
    ...     loss = torch.nn.functional.cross_entropy(model(ids).logits.flatten(0, 1), labels.flatten())
    ...     loss.backward()

A pipelined plan's :func:`apply` returns a :class:`Pipelined`: this rank's
stage modules and ``schedule(loss_fn)``, the ``torch.distributed.pipelining``
schedule the plan names, whose ``step`` runs the micro-batches.

The plan is read and checked without torch (:func:`load`); torch is
imported only by what builds torch objects.  The tensor-parallel styles
are PyTorch's (``ColwiseParallel``, ``RowwiseParallel``,
``SequenceParallel``, ``PrepareModuleInput``, ``PrepareModuleOutput``,
``PrepareModuleInputOutput``) but for ``ExpertsTensorParallel``: a mixture
of experts whose weights are stacked in one 3-D tensor per projection
(``transformers``' ``MixtralExperts``: ``gate_up_proj`` ``[E, 2F, H]``,
gate rows then up rows, and ``down_proj`` ``[E, H, F]``), each rank keeping
its share of the ``F`` hidden units of every expert (of the gate and of the
up rows alike) and running the model's own expert code on them; the
outputs are partial sums.
"""

from __future__ import annotations

import re
from contextlib import nullcontext
from dataclasses import dataclass

from errors import InputError

__all__ = ["load", "apply", "TorchPlan", "Pipelined", "PlanError", "FORMAT", "VERSION", "STYLES"]

FORMAT = "pase-torch-plan"
VERSION = 2
STYLES = ("ColwiseParallel", "RowwiseParallel", "SequenceParallel", "PrepareModuleInput", "PrepareModuleOutput",
          "PrepareModuleInputOutput", "ExpertsTensorParallel")
SCHEDULES = ("ScheduleGPipe", "Schedule1F1B", "ScheduleInterleaved1F1B")
_PLACEMENT = re.compile(r"^(Replicate\(\)|Partial\(\)|Shard\(-?\d+\))$")
MAX_BYTES = 64 << 20


class PlanError(InputError):
    """A file that is not a ``--export dtensor`` plan this module reads."""


@dataclass(frozen=True)
class TorchPlan:
    """A checked plan (the parsed JSON document in ``doc``)."""

    doc: dict

    @property
    def mesh_names(self) -> tuple[str, ...]:
        return tuple(self.doc["mesh"]["dim_names"])

    @property
    def mesh_shape(self) -> tuple[int, ...]:
        return tuple(self.doc["mesh"]["shape"])

    @property
    def world_size(self) -> int:
        import math

        return math.prod(self.mesh_shape)

    def device_mesh(self, device_type: str):
        """``init_device_mesh(device_type, shape, mesh_dim_names=names)``
        over the default process group (its size must be the plan's)."""
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh

        if dist.is_initialized() and dist.get_world_size() != self.world_size:
            raise PlanError(f"the plan runs on {self.world_size} processes; this job has {dist.get_world_size()}")
        return init_device_mesh(device_type, self.mesh_shape, mesh_dim_names=self.mesh_names)

    def loss_parallel(self):
        """PyTorch's ``loss_parallel()`` context where the plan computes
        the loss over a vocabulary split by tensor parallelism (the
        logits stay split: ``Shard(-1)``), else a context that does
        nothing.  Compute the loss and call ``backward`` inside it."""
        tp = self.doc.get("tensor_parallel")
        if tp and tp.get("loss_parallel"):
            from torch.distributed.tensor.parallel import loss_parallel

            return loss_parallel()
        return nullcontext()


    def context_parallel(self, mesh, **buffers):
        """PyTorch's ``context_parallel`` context over the plan's ``cp``
        mesh dimension, sharding ``buffers`` (``input_ids=..., labels=...``)
        in place along their sequence dimension, where the plan has
        context parallelism (PyTorch's ring attention: CUDA devices), else
        a context that does nothing.  Run the step inside it."""
        cp = self.doc.get("context_parallel")
        if not cp:
            return nullcontext()
        from torch.distributed.tensor.experimental import context_parallel

        dims = cp.get("buffer_seq_dims", {})
        return context_parallel(mesh[cp["mesh_dim"]], buffers=list(buffers.values()),
                                buffer_seq_dims=[dims.get(name, 1) for name in buffers])


def load(source) -> TorchPlan:
    """The :class:`TorchPlan` of a ``--export dtensor`` file (a path), its
    text, or its parsed document; :class:`PlanError` in one line for
    anything else."""
    if isinstance(source, TorchPlan):
        return source
    if isinstance(source, dict):
        return _checked(source)
    from readers import document

    return _checked(document(source, MAX_BYTES, "plan file", PlanError))


def _checked(doc) -> TorchPlan:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise PlanError(f"not a {FORMAT} document (written by scheduler.py --export dtensor)")
    if doc.get("version") != VERSION:
        raise PlanError(f"version {doc.get('version')!r} of {FORMAT}; this module reads version {VERSION}")
    try:
        names, shape = list(doc["mesh"]["dim_names"]), [int(s) for s in doc["mesh"]["shape"]]
        if len(names) != len(shape) or len(set(names)) != len(names) or min(shape, default=1) < 1:
            raise PlanError("the mesh's dim_names and shape do not match")
        tp = doc.get("tensor_parallel")
        if tp:
            if tp["mesh_dim"] not in names:
                raise PlanError(f"tensor_parallel: mesh dimension {tp['mesh_dim']!r} is not the mesh's")
            for fqn, style in tp["plan"].items():
                if style.get("style") not in STYLES:
                    raise PlanError(f"tensor_parallel: {fqn}: unknown style {style.get('style')!r}")
                for key, value in style.items():
                    if key.endswith("layouts"):
                        values = value.values() if isinstance(value, dict) else value if isinstance(value, list) \
                            else [value]
                        for v in values:
                            if v is not None and not _PLACEMENT.match(str(v)):
                                raise PlanError(f"tensor_parallel: {fqn}: {key}: {v!r} is not a placement")
        dp = doc.get("data_parallel")
        if dp:
            for name in dp["shard"] + dp["replicate"]:
                if name not in names:
                    raise PlanError(f"data_parallel: mesh dimension {name!r} is not the mesh's")
            if not all(isinstance(u, str) for u in dp["fully_shard"]):
                raise PlanError("data_parallel: fully_shard holds module names")
        pp = doc.get("pipeline")
        if pp:
            if pp["schedule"] not in SCHEDULES:
                raise PlanError(f"pipeline: unknown schedule {pp['schedule']!r}")
            if pp["mesh_dim"] not in names:
                raise PlanError(f"pipeline: mesh dimension {pp['mesh_dim']!r} is not the mesh's")
            for stage in pp["stages"]:
                int(stage["stage"]), int(stage["rank"]), list(stage["layers"])
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        if isinstance(e, PlanError):
            raise
        raise PlanError(f"a malformed {FORMAT} document ({type(e).__name__}: {e})") from None
    return TorchPlan(doc)


# -- building torch objects ------------------------------------------------------------------


def _placement(text):
    from torch.distributed.tensor import Partial, Replicate, Shard

    if text is None:
        return None
    if text == "Replicate()":
        return Replicate()
    if text == "Partial()":
        return Partial()
    return Shard(int(text[len("Shard("):-1]))


def _layouts(value):
    if isinstance(value, list):
        return tuple(_placement(v) for v in value)
    if isinstance(value, dict):
        return {k: _placement(v) for k, v in value.items()}
    return _placement(value)


def _style(spec: dict):
    """The ``ParallelStyle`` object of one plan entry."""
    from torch.distributed.tensor import parallel as tp

    kwargs = {k: _layouts(v) if k.endswith("layouts") else v for k, v in spec.items() if k != "style"}
    if spec["style"] == "ExpertsTensorParallel":
        return ExpertsTensorParallel(**kwargs)
    return getattr(tp, spec["style"])(**kwargs)


def _experts_style():
    """The ``ExpertsTensorParallel`` class, defined once torch is imported."""
    import torch
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.experimental import local_map
    from torch.distributed.tensor.parallel import ParallelStyle
    from torch.distributed.tensor.placement_types import _StridedShard

    class _ExpertsTensorParallel(ParallelStyle):
        """Tensor parallelism of stacked experts (see the module docstring):
        ``gate_up_proj`` ``[E, 2F, H]`` split over ``F`` in both halves,
        ``down_proj`` ``[E, H, F]`` over ``F``; the inputs (tokens, their
        experts and weights) replicated, the output partial sums."""

        def __init__(self, gate_up: str = "gate_up_proj", down: str = "down_proj"):
            super().__init__()
            self.gate_up, self.down = gate_up, down

        def _apply(self, module, mesh):
            places = {self.gate_up: [_StridedShard(1, split_factor=2)], self.down: [Shard(2)]}
            for name, placement in places.items():
                param = getattr(module, name)
                module.register_parameter(name, torch.nn.Parameter(distribute_tensor(param.data, mesh, placement)))
            shadow = module.__class__.__new__(module.__class__)
            shadow.__dict__.update({k: v for k, v in module.__dict__.items() if k != "_parameters"})
            shadow._parameters = {}
            forward = module.__class__.forward

            def local(hidden, index, weights, gate_up, down):
                object.__setattr__(shadow, self.gate_up, gate_up)
                object.__setattr__(shadow, self.down, down)
                try:
                    return forward(shadow, hidden, index, weights)
                finally:
                    object.__delattr__(shadow, self.gate_up)
                    object.__delattr__(shadow, self.down)

            rep = [Replicate()]
            mapped = local_map(local, out_placements=[Partial()],
                               in_placements=(rep, rep, rep, places[self.gate_up], places[self.down]),
                               in_grad_placements=([Partial()], rep, [Partial()], places[self.gate_up],
                                                   places[self.down]), device_mesh=mesh)

            def run(hidden, index, weights):
                args = [a if isinstance(a, DTensor) else DTensor.from_local(a, mesh, rep, run_check=False)
                        for a in (hidden, index, weights)]
                return mapped(*args, getattr(module, self.gate_up), getattr(module, self.down))

            module.forward = run
            return module

    return _ExpertsTensorParallel


def ExpertsTensorParallel(**kwargs):  # noqa: N802 (a ParallelStyle, named as PyTorch names them)
    """An instance of the ``ExpertsTensorParallel`` style (torch imported on use)."""
    return _experts_style()(**kwargs)


def _submesh(mesh, names):
    """The mesh of ``names`` (flattened into one dimension when several)."""
    names = tuple(names)
    if len(names) == 1:
        return mesh[names[0]]
    return mesh[names]._flatten("_".join(names))


def _tensor_parallel(model, plan: TorchPlan, mesh):
    from torch.distributed.tensor.parallel import parallelize_module

    tp = plan.doc.get("tensor_parallel")
    if not tp:
        return model
    styles = {fqn: _style(spec) for fqn, spec in tp["plan"].items()}
    tied = _tied(model)
    parallelize_module(model, mesh[tp["mesh_dim"]], styles)
    if tied:
        model.lm_head.weight = model.get_input_embeddings().weight  # the tied table, sharded once (Shard(0))
    return model


def _tied(model) -> bool:
    out, inp = getattr(model, "get_output_embeddings", lambda: None)(), model.get_input_embeddings()
    return out is not None and out.weight is inp.weight


def _data_parallel(model, plan: TorchPlan, mesh, units=None):
    """``fully_shard`` each unit the plan names that ``model`` holds, then
    the model: parameters sharded over ``shard``, replicated over
    ``replicate`` (HSDP's mesh: replicate, shard)."""
    from torch.distributed.fsdp import fully_shard

    dp = plan.doc.get("data_parallel")
    if not dp:
        return model
    names = [n for n in dp["replicate"]] + [n for n in dp["shard"]]
    if len(dp["shard"]) > 1:
        shard = _submesh(mesh, dp["shard"])
        dp_mesh = mesh[tuple(dp["replicate"]) + (shard.mesh_dim_names[0],)] if dp["replicate"] else shard
    else:
        dp_mesh = mesh[tuple(names)] if len(names) > 1 else mesh[names[0]]
    held = dict(model.named_modules())
    for fqn in dp["fully_shard"]:
        if fqn and fqn in held:
            fully_shard(held[fqn], mesh=dp_mesh, reshard_after_forward=dp.get("reshard_after_forward", True))
    fully_shard(model, mesh=dp_mesh, reshard_after_forward=dp.get("reshard_after_forward", True))
    return model


def apply(model, plan, mesh, device=None):
    """``model`` (a ``transformers`` causal language model of the plan's
    class) parallelised by ``plan`` (a path, a document or a
    :class:`TorchPlan`) on ``mesh`` (``plan.device_mesh(device_type)``):
    tensor parallelism, then FSDP or replication; a pipelined plan gives a
    :class:`Pipelined` of this rank's stages (``device``: where their
    activations are received, default the mesh's device type's current
    device)."""
    plan = load(plan)
    expected = plan.doc.get("model_class")
    if expected and type(model).__name__ != expected:
        raise PlanError(f"the plan is for a {expected}, not a {type(model).__name__}")
    ac = plan.doc.get("activation_checkpointing")
    if ac and ac.get("applied"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if plan.doc.get("pipeline"):
        return pipelined(model, plan, mesh, device)
    _tensor_parallel(model, plan, mesh)
    return _data_parallel(model, plan, mesh)


@dataclass
class Pipelined:
    """This rank's pipeline stages: ``modules`` (``torch.nn.Module`` each,
    parallelised like the model), ``stages`` (``PipelineStage`` each) and
    the schedule's class and micro-batch count."""

    modules: list
    stages: list
    schedule_class: type
    microbatches: int

    def schedule(self, loss_fn):
        """The schedule over this rank's stages, ``loss_fn(output, target)``
        on the last; ``schedule.step(inputs)`` on the first stage,
        ``step(target=..., losses=[])`` on the last, ``step()`` between."""
        stages = self.stages if len(self.stages) > 1 else self.stages[0]
        return self.schedule_class(stages, n_microbatches=self.microbatches, loss_fn=loss_fn)


# -- pipeline stages ----------------------------------------------------------------------------

CAUSAL = ("sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")


def decoder_stage(model, layers, first: bool, last: bool, sequence_mesh=None):
    """The stage module of ``model`` running ``layers`` (indices), with the
    embedding when ``first`` and the norm and head when ``last``: under
    the model's own module names, computing the rotary positions again,
    running causal attention without a mask tensor (the ``sdpa`` and flash
    attention of ``transformers`` apply causality themselves, as in
    training on sequences without padding).  ``sequence_mesh``: the
    tensor-parallel mesh of a sequence-parallel plan, whose stages send and
    receive their shard of the sequence (a plain tensor)."""
    import torch
    from torch import nn

    base = model.model

    class Body(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = base.embed_tokens if first else None
            self.layers = nn.ModuleDict({str(i): base.layers[i] for i in layers})
            self.norm = base.norm if last else None
            self.rotary_emb = base.rotary_emb

    class DecoderStage(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = Body()
            self.lm_head = model.lm_head if last else None

        def forward(self, x):
            from torch.distributed.tensor import DTensor, Shard

            body = self.model
            if first:
                h = body.embed_tokens(x)
            elif sequence_mesh is not None:
                h = DTensor.from_local(x, sequence_mesh, [Shard(1)], run_check=False)
            else:
                h = x
            position_ids = torch.arange(h.shape[1], device=x.device).unsqueeze(0)
            position = body.rotary_emb(h.to_local() if isinstance(h, DTensor) else h, position_ids)
            for layer in body.layers.values():
                h = layer(h, attention_mask=None, position_ids=position_ids, position_embeddings=position)
            if last:
                return self.lm_head(body.norm(h))
            return h.to_local() if isinstance(h, DTensor) else h

    return DecoderStage()


def pipelined(model, plan, mesh, device=None) -> Pipelined:
    """This rank's stages of ``model`` under ``plan`` on ``mesh``."""
    import torch
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining import schedules

    attention = getattr(model.config, "_attn_implementation", None)
    if attention not in CAUSAL:
        raise PlanError(f"pipeline stages run causal attention without a mask: load the model with "
                        f"attn_implementation='sdpa' (it has {attention!r})")
    pp = plan.doc["pipeline"]
    pp_mesh = mesh[pp["mesh_dim"]]
    rank = pp_mesh.get_local_rank()
    tp = plan.doc.get("tensor_parallel") or {}
    sequence_mesh = mesh[tp["mesh_dim"]] if tp.get("sequence_parallel") else None
    _tensor_parallel(model, plan, mesh)
    n = len(pp["stages"])
    if device is None:
        kind = mesh.device_type
        device = torch.device(kind, torch.accelerator.current_device_index()) if kind != "cpu" else torch.device("cpu")
    modules, stages = [], []
    for stage in pp["stages"]:
        if stage["rank"] != rank:
            continue
        k = stage["stage"]
        module = decoder_stage(model, stage["layers"], k == 0, k == n - 1, sequence_mesh)
        _data_parallel(module, plan, mesh)
        modules.append(module)
        stages.append(PipelineStage(module, k, n, device, group=pp_mesh.get_group()))
    return Pipelined(modules, stages, getattr(schedules, pp["schedule"]), pp["microbatches"])
