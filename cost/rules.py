"""The cost model's rules and constants: :class:`CostModel`, the machine
(a :class:`cluster.Cluster`) and the modelling rules that turn work into
FLOP or seconds, and the checks every costing shares (the device count, an
operator's extents at its configurations).

The rules' defaults are the original PaSE tool's (Elango, IPDPS 2021); on a
cluster with a memory bandwidth (a real device) the realistic time model
applies (:mod:`cost.time`).  Nothing here prices work or counts bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from cluster import Cluster
from errors import SettingError, shown
from graph import Operator
from kinds import Extents

__all__ = ["CostModel", "AUTO", "EMBEDDING_SYNC", "MAX_PROCS", "OPTIMIZERS", "check_procs", "extents",
           "regathered", "float8_product", "float8_input", "gathered_in_fp8"]

EMBEDDING_SYNC = ("dense", "sparse", "best")
AUTO = "auto"  # an option the search chooses
MAX_PROCS = 10**6
#: extra copies of the weights an optimizer keeps (momentum; Adam's two moments)
OPTIMIZERS = {"sgd": 0, "momentum": 1, "adam": 2}


@dataclass(frozen=True)
class CostModel:
    """The machine and the modelling rules that turn work into FLOP.

    The rules' defaults are the original PaSE model; they only change how an
    Embedding is costed (see :class:`kinds.gemm.Embedding`):
    ``embedding_lookup`` costs its compute as a row gather and gradient
    scatter-add instead of a one-hot GEMM; ``embedding_sync`` exchanges its
    weight gradient by a ``"dense"`` all-reduce, a ``"sparse"`` push/pull of
    the rows touched (Parallax), or the cheaper of the two (``"best"``);
    ``distinct_rows`` is the number of distinct vocabulary rows a device's
    tokens touch per step (``None``: one per token).

    ``optimizer`` (``sgd``, ``momentum``, ``adam``) sets the optimizer state
    of the memory model (:meth:`memory_bytes`); it changes no cost.

    ``options``: the execution options (``options/``) as ``(name, value)``
    pairs: a value every operator it applies to takes, or ``"auto"``: the
    search chooses per operator (or block).  Those not named stay at their
    default.

    On a cluster with a memory bandwidth (:attr:`cluster.Cluster.realistic`,
    a real device) the *realistic* time model applies (:func:`price`): vendor
    FLOP at the device's efficiencies, a roofline with the memory traffic,
    collectives at NCCL's bus bandwidth, gradient and weight collectives
    overlapped with computation.  Otherwise the PaSE paper's model.

    ``micro_batches``: the costs are those of a pipeline stage's operators
    for one of that many micro-batches (:func:`price`): what each
    micro-batch pays, and the gradients' synchronisation, paid once per
    step, shared among them; ``pipelined``: that stage is one of several
    (``pp > 1``), where a framework may keep the stage's gathered weights
    and whole gradients over the step's micro-batches (its ``staged``),
    rather than the micro-batches of one stage accumulated one after the
    other (gradient accumulation).

    ``pooled``: a result's repeated blocks pool their overlapped
    collectives under their passes (:func:`cost.evaluate.block_credits`);
    the searches compare their candidates without, in the operators' own
    costs their bounds are of.

    ``framework``: the training framework that runs the plan
    (:class:`frameworks.Framework`), or ``None``: the tool's own model.
    Its model states replace :meth:`parameter_bytes`' layout, and the time
    (:mod:`cost.time`) and memory (:mod:`cost.memory`, ``options/``) rules
    read it.
    """

    cluster: Cluster = Cluster()
    embedding_lookup: bool = False
    embedding_sync: str = "dense"
    distinct_rows: int | None = None
    optimizer: str = "adam"
    options: tuple = ()
    micro_batches: int | None = None
    pipelined: bool = False
    framework: object = None
    pooled: bool = True

    def __post_init__(self):
        if not isinstance(self.cluster, Cluster):
            raise TypeError(f"cluster must be a Cluster, got {self.cluster!r}")
        if self.embedding_sync not in EMBEDDING_SYNC:
            raise SettingError("embedding_sync", f"must be one of {', '.join(EMBEDDING_SYNC)}, "
                                                 f"got {shown(self.embedding_sync)}")
        if not isinstance(self.embedding_lookup, bool):
            raise SettingError("embedding_lookup", f"must be true or false, got {shown(self.embedding_lookup)}")
        m = self.micro_batches
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise SettingError("micro_batches", f"must be an integer >= 1, got {shown(m)}")
        if not isinstance(self.pipelined, bool):
            raise SettingError("pipelined", f"must be true or false, got {shown(self.pipelined)}")
        u = self.distinct_rows
        if u is not None and (isinstance(u, bool) or not isinstance(u, int) or u < 1):
            raise SettingError("distinct_rows", f"must be an integer >= 1, got {shown(u)}")
        if self.optimizer not in OPTIMIZERS:
            raise SettingError("optimizer", f"must be one of {', '.join(OPTIMIZERS)}, got {shown(self.optimizer)}")
        if self.framework is not None:
            from frameworks import Framework

            if not isinstance(self.framework, Framework):
                raise TypeError(f"framework must be a Framework, got {self.framework!r}")
        from options import OPTIONS

        opts = dict(self.options)
        for name, value in opts.items():
            if name not in OPTIONS:
                raise SettingError(name, "is not an execution option")
            if value != AUTO and value not in OPTIONS[name].values:
                raise SettingError(name, f"must be one of {', '.join(map(str, OPTIONS[name].values))} or auto, "
                                         f"got {shown(value)}")
        object.__setattr__(self, "options", tuple(sorted((k, v) for k, v in opts.items()
                                                         if v != OPTIONS[k].default)))

    @property
    def realistic(self) -> bool:
        """Whether the realistic time model applies (a real device)."""
        return self.cluster.realistic

    def option(self, name: str):
        """An option's setting: a value, ``"auto"``, or its default."""
        from options import OPTIONS

        return dict(self.options).get(name, OPTIONS[name].default)

    def with_sequence_parallel(self, sp: bool) -> "CostModel":
        """The model with its framework running sequence parallelism or not
        (a standard configuration's ``sp``; only a framework's rules read
        it: without one, the model itself)."""
        fw = self.framework
        if fw is None or fw.sp == bool(sp):
            return self
        return replace(self, framework=replace(fw, sp=bool(sp)))

    def parameter_bytes(self) -> tuple[float, float, float]:
        """Bytes per weight element of (weights, gradients, optimizer state).

        In the precision's own type, weights and gradients take its bytes each
        and every optimizer copy as much (the original's 8-byte word: 8, 8,
        8 per copy).  In bf16 or fp16, the mixed-precision layout: 2-byte
        weights and gradients, and a 4-byte master copy of the weights plus
        4 bytes per optimizer copy (Adam: 2 + 2 + 12 = 16 bytes).
        """
        if self.framework is not None:  # the framework's layout, nothing sharded
            s = self.framework.state_bytes(0, OPTIMIZERS[self.optimizer])
            return s.weights[0], s.gradients[0], s.optimizer[0]
        b = self.cluster.word_bytes
        copies = OPTIMIZERS[self.optimizer]
        if self.cluster.precision in ("bf16", "fp16"):
            return float(b), float(b), 4.0 + 4.0 * copies
        return float(b), float(b), float(b * copies)

    def stage_bytes(self, stage: int) -> tuple:
        """Bytes per weight element of (weights, gradients, optimizer state)
        at ZeRO stage ``stage``, each as ``(held whole, sharded)`` over the
        replicas: the framework's, else :meth:`parameter_bytes`' copies
        sharded stage by stage (optimizer state from stage 1, gradients from
        2, weights from 3)."""
        if self.framework is not None:
            s = self.framework.state_bytes(stage, OPTIMIZERS[self.optimizer])
            if self.framework.grad_buffer:  # the gradients held in the precision they are reduced in
                r = self.cluster.grad_bytes / 4.0
                return s.weights, (s.gradients[0] * r, s.gradients[1] * r), s.optimizer
            return s.weights, s.gradients, s.optimizer
        wb, gb, ob = self.parameter_bytes()
        return tuple((0.0, x) if stage >= level else (x, 0.0) for x, level in ((wb, 3), (gb, 2), (ob, 1)))

    def gathered_bytes(self) -> float:
        """Bytes per weight element held while its operator (a block's
        operators) runs with its weights sharded (ZeRO stage 3)."""
        if self.framework is not None:
            return self.framework.gathered
        wb, gb, _ = self.parameter_bytes()
        return 2.0 * wb + gb

    def memory_bytes(self, weights, activations) -> tuple:
        """(weights, gradients, optimizer state, activations) bytes of the
        given weight and activation element counts (arrays broadcast)."""
        wb, gb, ob = self.parameter_bytes()
        return weights * wb, weights * gb, weights * ob, activations * float(self.cluster.word_bytes)

    @property
    def original(self) -> bool:
        """True when the rules are the original PaSE model's."""
        return not self.embedding_lookup and self.embedding_sync == "dense"

    def describe(self) -> str:
        """The rules in force, in a few words, for the report's header."""
        if self.realistic:
            c, fw = self.cluster, self.framework
            sharded = fw is not None and fw.sharded_overlap is not None and fw.sharded_overlap != c.overlap
            return (f"realistic ({c.device or 'a measured device'}): vendor FLOP at {100 * c.matmul_eff:.0f}% of peak "
                    f"for matrix products, {100 * c.attention_eff:.0f}% for fused attention, memory-bound work at "
                    f"{100 * c.memory_eff:.0f}% of {c.mem_bw:g} GB/s (roofline); gradients and gathered weights "
                    + ("overlap computation" if c.overlap == 1.0 else "do not overlap computation" if c.overlap == 0.0
                       else f"overlap computation ({100 * c.overlap:.0f}% of them)")
                    + (f" (under ZeRO 2 and 3, sharded as {fw.title} runs them, "
                       f"{'they do' if fw.sharded_overlap == 1.0 else f'{100 * fw.sharded_overlap:.0f}% of them'})"
                       if sharded else ""))
        if self.original:
            return "original PaSE (embedding = one-hot GEMM, dense gradients)"
        compute = "row lookup" if self.embedding_lookup else "one-hot GEMM"
        sync = {"dense": "dense all-reduce", "sparse": "sparse push/pull",
                "best": "cheaper of dense/sparse"}[self.embedding_sync]
        rows = "" if self.distinct_rows is None else f", {self.distinct_rows} distinct rows"
        return f"embedding = {compute}, gradient = {sync}{rows}"


def overlap_share(model: CostModel, sharded: bool) -> float:
    """The share of gradient collectives and weight gathers that may run
    under computation: the cluster's ``overlap``, or, where the framework
    overlaps sharded states whatever it is told (its ``sharded_overlap``:
    Megatron-FSDP), that share for gradients that are ``sharded`` (ZeRO 2
    and 3: an operator's ``Work.sharded``, a stage's
    ``Result.sharded_gradients``)."""
    fw = model.framework
    return model.cluster.overlap if fw is None else fw.overlap_of(model.cluster.overlap, sharded)


def keeps_stage_whole(model: CostModel) -> bool:
    """Whether the costs are of one of several pipeline stages whose
    framework keeps the stage's gathered weights and whole gradients over
    the step's micro-batches (its ``staged``: torchtitan's FSDP2 under
    ``torch.distributed.pipelining``), reducing the gradients once."""
    fw = model.framework
    return bool(fw is not None and model.pipelined and any(fw.staged))


def every_micro_batch(work, model: CostModel) -> bool:
    """Whether ``work``'s gradients are reduced after every micro-batch
    rather than once a step: sharded (ZeRO 2 and 3, ``Work.sharded``) under
    a framework that reduce-scatters them so (its
    ``sharded_every_micro_batch``), unless it keeps a pipeline stage's
    gradients whole (:func:`keeps_stage_whole`)."""
    fw = model.framework
    return bool(work.sharded and fw is not None and fw.sharded_every_micro_batch and not keeps_stage_whole(model))


def under_backward(work, model: CostModel, gathers, sync):
    """``(under, left)``: of a pipeline stage's micro-batch, the collectives
    that run under its backward pass (its weights' backward gathers, and
    the gradients' reduction where :func:`every_micro_batch`), and the
    gradients' reduction left for the step's end.  A stage kept whole
    (:func:`keeps_stage_whole`) gathers nothing backward."""
    if keeps_stage_whole(model):
        return 0.0 * gathers, sync
    if every_micro_batch(work, model):
        return gathers + sync, 0.0 * sync
    return gathers, sync


def gather_share(model: CostModel) -> float:
    """The share of its weights' forward gather (and of what that gather
    leaves exposed under the forward pass) a micro-batch pays: its own,
    or, where the stage is kept whole (:func:`keeps_stage_whole`), its
    share of the one gather a step makes, under the first micro-batch's
    forward pass."""
    return 1.0 / float(model.micro_batches or 1) if keeps_stage_whole(model) else 1.0


def inside_node(x, c, C: Extents, net: Cluster):
    """``x``, the time of the collective ``c``, where its group lies inside
    one node of a cluster of several (else 0)."""
    return np.where(np.asarray(net.across(C, c.letters)) == 1, x, 0.0) if net.two_level else 0.0


def nvlink_parts(work, C: Extents, net: Cluster, t_fwd, t_bwd, inside) -> tuple:
    """``(forward, backward, crossing)``: the blocking collectives of
    ``work`` inside one node (``inside``, FLOP-equivalents), shared between
    the passes as their times are (the forward's replays in the backward
    pass), and whether its overlapped collectives (weights, gradients)
    all cross nodes: those run under the others' time too, on other
    links (:func:`nvlink_windows`)."""
    from kinds.base import OVERLAPPED

    cross = [c for c in work.comms if c.role in OVERLAPPED and c.role != "inputs"]
    crossing = np.logical_and.reduce([np.asarray(net.across(C, c.letters)) > 1 for c in cross]) \
        if cross and net.two_level else False
    if not np.any(inside):
        return 0.0, 0.0, crossing
    t_fwd = np.asarray(t_fwd, dtype=float)
    fwd = inside * t_fwd / np.maximum(t_fwd * (1.0 + work.replays) + t_bwd, 1e-300)
    return fwd, inside - fwd, crossing


def nvlink_windows(nvlink) -> tuple:
    """``(forward, backward)``: of :func:`nvlink_parts`, the time inside a
    node an operator's own overlapped collectives run under (where they
    cross nodes; zero where not)."""
    fwd, bwd, crossing = nvlink
    return np.where(crossing, fwd, 0.0), np.where(crossing, bwd, 0.0)


def contention_of(model: CostModel) -> float:
    """The computation a framework's collectives slow per second they run
    under it (0 without a framework)."""
    return model.framework.contention if model.framework is not None else 0.0


def check_procs(p) -> int:
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or not 1 <= p <= MAX_PROCS:
        raise SettingError("p", f"must be an integer from 1 to {MAX_PROCS:,}, got {shown(p)}")
    return int(p)


def regathered(op: Operator, C: Extents, model: CostModel) -> list:
    """``(input position, letters)`` of each activation ``op`` keeps that
    arrives all-gathered from a sequence-parallel region and that the
    framework keeps as this device's shard, all-gathered again for the
    backward pass (Megatron-LM's sequence parallelism, Korthikanti et al.
    2022, section 4.2.2): with sequence parallelism on, an activation input
    the operator's configurations replicate over the devices that split
    its other letters (a column-parallel product's input, replicated over
    its tensor-parallel group).  ``letters`` name those devices (empty
    when none: nothing to gather).  Nothing without such a framework."""
    fw = model.framework
    if fw is None or not fw.sp or fw.sequence_parallel != "shard":
        return []
    out = []
    kept = op.kind.saved(op)
    for i, t in enumerate(op.inputs):
        if t.role != "activation" or not any(t is k for k in kept):
            continue
        mine = set("".join(t.axes))
        out.append((i, "".join(c for c in op.dims if c not in mine)))
    return out


def float8_product(op: Operator, context, model: CostModel) -> bool:
    """Whether ``op`` runs as a Float8 product under the model's framework
    (``--float8``): a weighted matrix product (``Einsum``, ``FC``) of a
    repeated block with weights of its own (``context``: its
    :class:`options.Context`; not the output layer)."""
    fw = model.framework
    if fw is None or not fw.float8 or context is None or context.block is None:
        return False
    return op.kind.name in ("Einsum", "FC") and any(t.role == "weight" and i not in context.shared
                                                     for i, t in enumerate(op.inputs))


def gathered_in_fp8(model: CostModel, what: str) -> bool:
    """Whether, under ``--float8``, the model's framework moves a Float8
    product's ``what`` (``weights``: ZeRO stage 3's all-gathers;
    ``inputs``: the activations re-distributed into it) at a byte per
    element, cast before (its ``float8_gathers``)."""
    fw = model.framework
    return fw is not None and fw.float8 and what in fw.float8_gathers


def float8_input(op: Operator, i: int, context, model: CostModel) -> bool:
    """Whether input ``i`` of ``op`` arrives re-distributed at a byte per
    element (cast before): an activation of a Float8 product whose
    framework moves its inputs in FP8 (torchao's Float8ColwiseParallel and
    PrepareFloat8ModuleInput all-gather the cast input)."""
    return (gathered_in_fp8(model, "inputs") and op.inputs[i].role != "weight"
            and float8_product(op, context, model))


def extents(op: Operator, configs) -> tuple[Extents, Extents]:
    C = np.asarray(configs, dtype=float).reshape(-1, len(op.space))  # (K, n)
    return Extents(op.dims, np.asarray(op.space, dtype=float)), Extents(op.dims, C)
