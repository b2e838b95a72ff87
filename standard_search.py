"""The best standard configuration (``--search standard``): the fastest
configuration of the space ``--plan`` spans that fits the device memory,
found by costing every point of a small grid.

The grid, for ``p`` devices and a model's roles (:mod:`standard`):

* ``tp``: the divisors of ``p`` up to the devices of a node (8 when the
  cluster names none); ``sp`` 0 and 1 where ``tp > 1`` and the model names
  its sequence;
* ``cp``: the divisors of ``p`` that leave at least 2048 tokens of the
  sequence on a device (1 without a sequence);
* ``ep``: 1 and, for a mixture of experts, the divisors of ``dp`` that
  divide the experts; where ``tp > 1``, also the experts unsplit by
  tensor parallelism (``etp = 1``) with ``ep`` any divisor of ``tp x cp x
  dp`` that divides the experts (Megatron-LM's parallel folding);
* ``pp``: 1 and the divisors of ``p`` up to the model's repeated blocks;
  with stages, micro-batches of 1, 2 and 4 samples (per data-parallel
  group) and the schedules 1f1b and, where the micro-batches come in
  groups of ``pp`` (as Megatron-LM runs them), interleaved:2 (where
  every stage holds two blocks or more) and interleaved:3 to 8 (where
  every stage's blocks divide into that many equal chunks, the embedding
  and the loss counted as blocks where the framework counts them);
* ``zero`` 0 to 3 without stages, 0 and 1 with them (Megatron-LM shards
  only the optimizer state across a pipeline's micro-batches), or the
  stages the framework runs (torchtitan: 0 and 3, with stages too; its
  expert parallelism 3 alone);
* under a framework, only the experts' parallelism it runs
  (``Framework.runs_experts``: Megatron-LM's tensor parallelism in a
  mixture of experts with sequence parallelism; torchtitan's experts
  split by tensor parallelism exactly when without expert parallelism,
  as torchtitan 0.3 runs them: ``--export torchtitan@0.2`` may still
  refuse an ``ep`` that does not take every tensor- and context-parallel
  rank);
  ``recompute`` none, selective, full;
* without stages, gradient accumulation: micro-batches of half, a
  quarter, ... of a data-parallel group's samples (what fits without
  recomputing, or with less of ZeRO's traffic, may be faster than the
  whole batch at once).

Points the model cannot take (a degree that does not divide what it
splits) are left out.  The result is exactly the best point of the grid
(the first in the grid's order of those that cost least, the lower ZeRO
stage and the lighter recomputation first), found without costing most
points (:func:`search`): every point is costed by counting
(:mod:`standard_costs`); a structure (every degree but the two options)
is bounded first, by its states against the capacity and by its step
without recomputation, and the structures are costed from the lowest
bound up until it passes the best point that fits; a structure whose two
leanest pairs (full recomputation, the highest ZeRO stage below 3 and
stage 3) do not fit has no pair that does.  Ties and memories within
rounding of the capacity are decided by the plan's own evaluation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from errors import InputError

__all__ = ["Found", "grid", "search"]

RECOMPUTE = ("none", "selective", "full")
MIN_TOKENS_PER_CP = 2048


@dataclass(frozen=True)
class Found:
    """The search's answer: the best configuration (``None`` when nothing
    fits), its step time (FLOP of the critical path) and memory, the points
    costed, skipped (bounded out before any was costed), that did not fit
    and structures the model cannot take, and the least memory any point
    needed (``least_is_bound``: a lower bound, nothing costed needed less)."""

    best: object
    cost: float
    memory: float
    costed: int
    skipped: int
    unfit: int
    invalid: int
    least_memory: float
    least_is_bound: bool = False


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


CHUNKS = (2, 3, 4, 5, 6, 7, 8)  # the interleaved schedule's model chunks per device the grid tries


def _chunkings(blocks: int, pp: int, framework=None, layers: int = 1) -> list[int]:
    """The interleaved schedule's chunks per device the grid tries for
    ``blocks`` blocks (of ``layers`` layers each) over ``pp`` stages, split
    as the framework splits them (:func:`pipeline.split_counts`): 2
    wherever every stage holds two blocks or more, and 3 to 8 where the
    blocks divide into that many equal chunks per stage (Megatron-LM's
    ``--num-layers-per-virtual-pipeline-stage``: Llama 3 70B's 80 layers
    over 8 stages in 5 chunks of 2), the embedding and the loss counted as
    blocks where the framework counts them (Llama 3.1 405B's 126 layers
    over 8 stages of 8 chunks of 2)."""
    from pipeline import Schedule, chunking_error, counts_ends, split_counts

    out = []
    for v in CHUNKS:
        counts, ends = split_counts(blocks, pp, v, framework, layers), counts_ends(blocks, pp, v, framework, layers)
        extra = 2 if ends else 0  # the embedding and the loss, counted
        fits = chunking_error(counts, Schedule("interleaved", v), ends) is None
        if fits and (v == 2 or (blocks + extra) % (pp * v) == 0):
            out.append(v)
    return out


def structures(g, p: int, batch: int, node: int, blocks: int, framework=None):
    """Every degree but the options (see the module docstring), as
    :class:`standard.Standard` values with ``dp`` filled; ``framework``
    splits the stages' blocks (:func:`_chunkings`)."""
    from blocks import find_chains
    from graph import operators
    from pipeline import block_layers
    from standard import Standard

    chains = find_chains(g) if framework is not None and framework.pipeline_split else []
    layers = block_layers(g, max(chains, key=lambda c: c.count * c.size)) if chains else 1

    roles = dict(g.graph.get("roles", {}))
    seq_letter, expert = roles.get("seq", ""), roles.get("expert", "")
    seq = max((op.space[op.dims.index(seq_letter)] for op in operators(g) if seq_letter and seq_letter in op.dims),
              default=0)
    experts = max((op.space[op.dims.index(expert)] for op in operators(g) if expert and expert in op.dims),
                  default=0)
    chunkings = {pp: _chunkings(blocks, pp, framework, layers) for pp in _divisors(p) if 1 < pp <= blocks}
    for tp in _divisors(p):
        if tp > node:
            break
        for sp in ((0, 1) if tp > 1 and seq_letter else (0,)):
            for cp in _divisors(p // tp):
                if cp > 1 and (not seq or seq // cp < MIN_TOKENS_PER_CP or seq % cp):
                    continue
                for pp in _divisors(p // (tp * cp)):
                    if pp > 1 and pp > blocks:
                        continue
                    dp = p // (tp * cp * pp)
                    if batch % dp:
                        continue
                    eps = [(e, None) for e in _divisors(dp) if e == 1 or experts % e == 0] if experts else [(1, None)]
                    if experts and tp > 1:  # parallel folding: the experts over the tensor-parallel devices too
                        eps += [(e, 1) for e in _divisors(tp * cp * dp) if experts % e == 0]
                    for ep, etp in eps:
                        if experts and framework is not None and not framework.runs_experts(
                                Standard(tp=tp, cp=cp, ep=ep, etp=etp, sp=sp)):
                            continue
                        if pp == 1:
                            yield Standard(tp=tp, dp=dp, cp=cp, ep=ep, etp=etp, sp=sp, microbatch=batch // dp)
                            continue
                        for micro in (1, 2, 4):
                            if (batch // dp) % micro:
                                continue
                            yield Standard(tp=tp, dp=dp, cp=cp, ep=ep, etp=etp, sp=sp, pp=pp, microbatch=micro)
                            if (batch // (dp * micro)) % pp:  # interleaved: micro-batches in groups of the stages
                                continue
                            for v in chunkings[pp]:
                                yield Standard(tp=tp, dp=dp, cp=cp, ep=ep, etp=etp, sp=sp, pp=pp, microbatch=micro,
                                               schedule="interleaved", chunks=v)


def grid(std, framework=None) -> list[tuple[int, str]]:
    """The (zero, recompute) pairs of a structure, in the order costed: the
    ZeRO stages the framework runs (its ``zero_stages``, with pipeline
    stages its ``pipeline_zero_stages``; without one, 0 to 3, and 0 and 1
    with stages)."""
    if framework is not None:  # the stages the framework runs (with its experts, where there are)
        zeros = tuple(z for z in range(4) if not framework.refuses(replace(std, zero=z), std.ep > 1))
    else:
        zeros = (0, 1, 2, 3) if std.pp == 1 else (0, 1)
    return [(z, r) for r in RECOMPUTE for z in zeros]


_TIE = 1e-9  # estimates this close (relative) to the best, or to the capacity, are decided by the plan's own figures


def search(g, p: int, batch: int, node: int, blocks: int, costing, capacity: float | None, exact,
           progress=None) -> Found:
    """The best point of the grid (see the module docstring):
    ``costing`` a :class:`standard_costs.Costing` of the model, ``exact(std)
    -> (step cost, memory bytes)`` the plan's own figures of one complete
    configuration, ``capacity`` the device memory (``None``: unbounded).

    Each structure is bounded before any of its options is costed (its
    states at its most sharded against the capacity; its step without
    options, :meth:`standard_costs.Costing.floor`), then the structures are
    costed from the lowest bound up until the bound passes the best point
    that fits: what is left can neither win nor, without a winner, fit.
    Estimates within rounding of the best or of the capacity are decided by
    ``exact``."""
    import heapq

    fw = costing.model.framework
    shapes = [x for x in structures(g, p, batch, node, blocks, fw) if grid(x, fw)]  # what the framework runs

    def grid_of(shape):
        return grid(shape, fw)

    tally = {"costed": 0, "skipped": 0, "unfit": 0, "invalid": 0}
    least = [math.inf, False]  # the least memory seen, and whether it is a bound (nothing costed needed less)
    queue = []
    bar = progress(len(shapes)) if progress is not None else None

    def admit(shape, index: int, depth: int) -> None:
        """Bound the structure ``shape`` (at its micro-batch) and queue it."""
        pairs = grid_of(shape)
        if capacity is not None:
            states = costing.least_states(shape, max(z for z, _ in pairs))
            if states > capacity:  # no option makes it fit
                tally["skipped"] += len(pairs)
                if states < least[0]:
                    least[:] = [states, True]
                return
        try:
            costing.register(shape)
        except InputError:
            tally["invalid"] += 1
            return
        queue.append((shape, index, depth))

    for i, shape in enumerate(shapes):
        admit(shape, i, 0)
    heap = []
    for shape, i, depth in queue:
        try:
            heapq.heappush(heap, (costing.floor(shape, _zeros(shape, fw)), i, depth, shape))
        except InputError:
            tally["invalid"] += 1
    fitted = []  # (estimate, zero, recompute index, structure, depth, std, signature)
    best = [math.inf]

    def cost_all(shape, i: int, depth: int) -> None:
        """Cost every option pair of ``shape``, keeping those that fit."""
        pairs = grid_of(shape)
        if capacity is not None:  # first the pairs that need the least memory: if they do not fit, none does
            least_of = min(costing.estimate(replace(shape, zero=z, recompute="full")).memory for z in _leanest(pairs))
            tally["costed"] += len(_leanest(pairs))
            if least_of < least[0]:
                least[:] = [least_of, False]
            if least_of > capacity * (1 + _TIE):
                tally["unfit"] += len(_leanest(pairs))
                tally["skipped"] += len(pairs) - len(_leanest(pairs))
                return
            tally["costed"] -= len(_leanest(pairs))  # costed again below (the estimates are kept)
        for zero, rec in pairs:
            std = replace(shape, zero=zero, recompute=rec)
            est = costing.estimate(std)
            tally["costed"] += 1
            memory = est.memory
            if capacity is not None and abs(memory - capacity) <= _TIE * capacity:
                memory = exact(std)[1]  # at the capacity: the plan's own figure decides
            if memory < least[0]:
                least[:] = [memory, False]
            if capacity is not None and memory > capacity:
                tally["unfit"] += 1
                continue
            fitted.append((est.cost, zero, RECOMPUTE.index(rec), i, depth, std, est.sig))
            best[0] = min(best[0], est.cost)

    def half(shape, i: int, depth: int):
        """``shape`` accumulating half its micro-batch's samples at a time,
        bounded (``None``: it cannot accumulate, or the model cannot take it)."""
        if shape.pp > 1 or shape.microbatch % 2:
            return None
        shape = replace(shape, microbatch=shape.microbatch // 2)
        try:
            costing.register(shape)
            return costing.floor(shape, _zeros(shape, fw)), i, depth + 1, shape
        except InputError:
            tally["invalid"] += 1
            return None

    done = 0
    try:
        while heap:
            floor, i, depth, shape = heapq.heappop(heap)
            if bar is not None:
                done += 1
                bar(min(done, len(shapes)), len(shapes))
            if floor <= best[0] * (1 + _TIE):
                cost_all(shape, i, depth)
            else:  # it cannot win
                tally["skipped"] += len(grid_of(shape))
            # its half accumulated may win all the same (the whole batch's activations needed recomputation, or
            # ZeRO's gathers, to fit): bounded on its own, costed in its turn
            nxt = half(shape, i, depth)
            if nxt is not None:
                heapq.heappush(heap, nxt)
    finally:
        if bar is not None and hasattr(bar, "close"):
            bar.close()
    if not fitted:
        return Found(None, math.inf, math.inf, tally["costed"], tally["skipped"], tally["unfit"], tally["invalid"],
                     least[0], least[1])
    near = [f for f in fitted if f[0] <= best[0] * (1 + _TIE)]
    if len({(f[0], f[6]) for f in near}) > 1:  # not one figure: the plan's own figures decide
        near = [(exact(f[5])[0],) + f[1:] for f in near]
    cost, *_, std, _ = min(near, key=lambda f: f[:5])
    cost, memory = exact(std)
    return Found(std, cost, memory, tally["costed"], tally["skipped"], tally["unfit"], tally["invalid"], least[0],
                 least[1])


def _zeros(shape, framework=None) -> set:
    return {z for z, _ in grid(shape, framework)}


def _leanest(pairs) -> tuple[int, ...]:
    """The ZeRO stages whose pairs with full recomputation need the least
    memory of a structure's ``pairs``: recomputing everything keeps less
    than any other choice, whatever the ZeRO stage (what a block no longer
    keeps is at least what one block holds again while it recomputes);
    ZeRO stages 1 and 2 each keep less than the one before, with nothing
    held on top; stage 3 shards the weights too but holds them gathered
    while an operator runs, so it is compared apart."""
    zeros = sorted({z for z, _ in pairs})
    lower = [z for z in zeros if z < 3]
    return tuple(([lower[-1]] if lower else []) + ([3] if 3 in zeros else []))
