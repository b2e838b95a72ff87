"""The host's pace: a token-dropless mixture-of-experts layer waits on the
CPU that launches its kernels.

A dropless layer cannot size its all-to-all or its grouped products until
it knows how many tokens each expert got: its dispatcher copies the counts
to the host and waits for them, once a layer in each forward pass
(Megatron Core's ``MoEAlltoAllTokenDispatcher`` and ``MoEFlexTokenDispatcher``:
``tokens_per_expert`` to the CPU before the all-to-all and the grouped
products' ``m_splits``).  The wait drains the device's queue, so the host
can never run ahead of it by more than a layer: a layer whose kernels the
host launches more slowly than the device runs them takes the host's time,
not the device's.  Fine-grained experts (many small products, a router,
permutations, an all-to-all, each its own kernel) reach that point on a
micro-batch of a few thousand tokens per device.

The model: each mixture-of-experts layer of a stage takes, per
micro-batch, ``max(device time, host)``, with ``host`` the framework's
``moe_host_ms``, or the run's own figure (``--host-ms``, a cluster file's
``host_ms``: another host's pace; :func:`host_ms`), forward and backward, a
third more where the layer re-runs its forward pass under full
recomputation.  The layers of a stage being
alike, a stage's ``n`` expert layers whose blocks take device time ``t``
wait ``max(0, n host - t)`` per micro-batch (:func:`wait`).  The rest of the
model runs at the device's pace.  A framework without the figure (and the
tool's own model) waits for nothing unless the run gives one.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["host_ms", "waits", "in_expert_blocks", "moe_nodes", "wait", "micro_batch", "stage_waits", "graph_wait",
           "REPLAY"]

#: a forward pass's share of a layer's launches (the backward pass launches about twice the forward's)
REPLAY = 1.0 / 3.0


def host_ms(model) -> float:
    """The host's milliseconds to launch a dropless expert layer's kernels
    for a micro-batch under the cost model ``model``: its cluster's
    ``host_ms`` (``--host-ms``, a cluster file, a plan file's record),
    else its framework's ``moe_host_ms`` (0 without a framework); 0 on the
    paper's model."""
    if not model.cluster.realistic:
        return 0.0
    if model.cluster.host_ms is not None:
        return model.cluster.host_ms
    fw = model.framework
    return fw.moe_host_ms if fw is not None else 0.0


def waits(model) -> bool:
    """Whether expert layers can wait on the host under the cost model
    ``model``: a host's time is given (:func:`host_ms`), on a real device."""
    return host_ms(model) > 0


def in_expert_blocks(dispatches, blocks) -> list[bool]:
    """For each operator (whether it is a dispatch of tokens to experts,
    ``dispatches``, and the block it belongs to, ``blocks``, ``None``
    outside blocks): whether it belongs to a block holding a dispatch (one
    expert layer for each it holds)."""
    moe = {b for d, b in zip(dispatches, blocks) if d and b is not None}
    return [b is not None and b in moe for b in blocks]


def moe_nodes(ops, ctx) -> list[bool]:
    """:func:`in_expert_blocks` of a graph's operators ``ops``, with their
    contexts ``ctx``."""
    return in_expert_blocks([op.kind.name == "Dispatch" for op in ops], [c.block for c in ctx])


def wait(model, layers: float, device: float, full: float = 0.0) -> float:
    """What a stage's ``layers`` expert layers (the blocks holding them),
    ``full`` of them re-running their forward pass, wait on the host per
    micro-batch beyond their blocks' ``device`` time (both in FLOP at the
    device's peak)."""
    if not layers or not waits(model):
        return 0.0
    host = host_ms(model) * 1e-3 * model.cluster.flops * 1e12 * (layers + REPLAY * full)
    return max(0.0, host - device)


def micro_batch(op, configs, model, ctx, options, priced=None) -> np.ndarray:
    """The device time (FLOP at its peak) one micro-batch of ``op`` takes
    at each of ``configs`` with its execution ``options`` (its context
    ``ctx``; ``priced``: its extents and work record for them, when the
    caller has them): its passes and their collectives (the gradients'
    reduction where each micro-batch pays it), without what a step does
    once (the gradients' reduction otherwise, the optimizer step), which no
    micro-batch's launches can hide under."""
    from cost.tables import with_options
    from cost.time import price_stage

    C, work = priced if priced is not None else with_options(op, configs, model, ctx, options)[:2]
    compute, comm, _ = price_stage(work, C, model, op, once=False)
    return np.asarray(compute + comm, dtype=float)


def stage_waits(g, ctx, ranges, results, model) -> list[float] | None:
    """What the expert blocks of each pipeline stage (the operators ``[lo,
    hi)`` of ``ranges`` of graph ``g``, contexts ``ctx``; ``results`` their
    :class:`result.Result` for a micro-batch, operators numbered from the
    stage's first) wait on the host per micro-batch; ``None`` where none
    can."""
    if not waits(model):
        return None
    from graph import operators

    ops = operators(g)
    moe, seen = moe_nodes(ops, ctx), {}
    return [_wait(model, ops, moe, ctx, lo, r.layers, r.edges, seen, r.credits)
            for (lo, hi), r in zip(ranges, results)]


def graph_wait(g, layers, edges, model, credits=()) -> float:
    """What the expert blocks of graph ``g`` run as one micro-batch (its
    ``layers``, :class:`result.Layer`, and ``edges``, ``(u, v, cost)``;
    ``credits``: what pooling their blocks' collectives saves each
    operator, :func:`cost.evaluate.block_credits`) wait on the host."""
    if not waits(model) or model.micro_batches is not None:
        return 0.0
    from blocks import find_chains
    from graph import operators
    from options import contexts

    ops = operators(g)
    ctx = contexts(g, find_chains(g))
    return _wait(model, ops, moe_nodes(ops, ctx), ctx, 0, layers, edges, {}, credits)


def _wait(model, ops, inside, ctx, lo: int, layers, edges, seen: dict, credits=()) -> float:
    """The wait of the expert blocks among ``layers`` (numbered from
    ``lo`` in the graph's ``ops``; ``inside``: whether each operator is in
    one), their micro-batch's device time priced by :func:`micro_batch`
    (``seen``: those priced already, by operator, decision and context),
    less what pooling their blocks' collectives saves (``credits``, by
    layer: the step takes it off their communication, so a layer waiting
    on the host gains nothing from it)."""
    from options import OPTIONS

    mine = [x for x in layers if inside[lo + x.id]]
    times = []
    for x in mine:
        op, c = ops[lo + x.id], ctx[lo + x.id]
        key = (op, x.decision, c.key)
        if key not in seen:
            options = {n: x.decision.option(n) for n in OPTIONS}
            seen[key] = float(micro_batch(op, [x.decision.config], model, c, options)[0])
        times.append(seen[key])
    device = math.fsum([*times, *(e for u, _, e in edges if inside[lo + u]),
                        *(-credits[x.id] for x in mine if credits)])
    dispatches = [x for x in mine if x.kind == "Dispatch"]  # a layer each (a block may hold several)
    full = sum(x.decision.option("recompute") == "full" for x in dispatches)
    return wait(model, len(dispatches), device, full)
