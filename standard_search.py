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
  divide the experts;
* ``pp``: 1 and the divisors of ``p`` up to the model's repeated blocks;
  with stages, micro-batches of 1, 2 and 4 samples (per data-parallel
  group) and the schedules 1f1b and interleaved:2 (where the stages'
  blocks divide in two);
* ``zero`` 0 to 3 without stages, 0 and 1 with them (Megatron-LM shards
  only the optimizer state across a pipeline's micro-batches);
  ``recompute`` none, selective, full;
* without stages, gradient accumulation (micro-batches of half, a quarter
  ... of a data-parallel group's samples) where no option fits the whole
  batch.

Points the model cannot take (a degree that does not divide what it
splits) are left out.  Within one structure (every degree but the two
options) the options are costed in an order that lets dominated ones be
skipped: ZeRO stages 0 to 2 take the same time (stages 1 and 2 move what
the all-reduce moves) in less memory, and recomputation only adds time, so
once a pair fits, the pairs of a higher stage within 0-2 or a heavier
recomputation are skipped (stage 3, whose weight gathers also overlap the
forward pass, may be faster or slower: it is compared only with itself);
of pairs of equal time the lower stage and the lighter recomputation is
kept (what frameworks run by default).  The result is exactly the best
point of the grid.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from errors import InputError

__all__ = ["Found", "grid", "search"]

RECOMPUTE = ("none", "selective", "full")
MIN_TOKENS_PER_CP = 2048


@dataclass(frozen=True)
class Found:
    """The search's answer: the best configuration (``None`` when nothing
    fits), its step time (FLOP of the critical path) and memory, the points
    costed and skipped, and the least memory any point needed."""

    best: object
    cost: float
    memory: float
    costed: int
    dominated: int
    unfit: int
    invalid: int
    least_memory: float


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def structures(g, p: int, batch: int, node: int, blocks: int):
    """Every degree but the options (see the module docstring), as
    :class:`standard.Standard` values with ``dp`` filled."""
    from graph import operators
    from standard import Standard

    roles = dict(g.graph.get("roles", {}))
    seq_letter, expert = roles.get("seq", ""), roles.get("expert", "")
    seq = max((op.space[op.dims.index(seq_letter)] for op in operators(g) if seq_letter and seq_letter in op.dims),
              default=0)
    experts = max((op.space[op.dims.index(expert)] for op in operators(g) if expert and expert in op.dims),
                  default=0)
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
                    eps = [1] + ([e for e in _divisors(dp) if e > 1 and experts % e == 0] if experts else [])
                    for ep in eps:
                        if pp == 1:
                            yield Standard(tp=tp, dp=dp, cp=cp, ep=ep, sp=sp, microbatch=batch // dp)
                            continue
                        for micro in (1, 2, 4):
                            if (batch // dp) % micro:
                                continue
                            yield Standard(tp=tp, dp=dp, cp=cp, ep=ep, sp=sp, pp=pp, microbatch=micro)
                            if blocks % (2 * pp) == 0:
                                yield Standard(tp=tp, dp=dp, cp=cp, ep=ep, sp=sp, pp=pp, microbatch=micro,
                                               schedule="interleaved", chunks=2)


def grid(std) -> list[tuple[int, str]]:
    """The (zero, recompute) pairs of a structure, in the order costed."""
    zeros = (0, 1, 2, 3) if std.pp == 1 else (0, 1)
    return [(z, r) for r in RECOMPUTE for z in zeros]


def search(g, p: int, batch: int, node: int, blocks: int, cost_of, capacity: float | None,
           progress=None) -> Found:
    """The best point: ``cost_of(std) -> (step cost, memory bytes)`` costs
    one complete configuration (an :class:`InputError` when the model
    cannot take it); ``capacity`` the device memory (``None``: unbounded)."""
    best = None  # (cost, zero, recompute index, memory, std)
    costed = dominated = unfit = invalid = 0
    least = float("inf")
    shapes = list(structures(g, p, batch, node, blocks))
    if progress is not None:
        progress = progress(len(shapes))
    try:
        for i, shape in enumerate(shapes):
            if progress is not None:
                progress(i, len(shapes))
            fitted = _structure(shape, batch, cost_of, capacity)
            costed += fitted[1]
            dominated += fitted[2]
            unfit += fitted[3]
            invalid += fitted[4]
            least = min(least, fitted[5])
            if fitted[0] is not None:
                key = fitted[0][:3]
                if best is None or key < best[:3]:
                    best = fitted[0]
    finally:
        if progress is not None and hasattr(progress, "close"):
            progress.close()
    if best is None:
        return Found(None, float("inf"), float("inf"), costed, dominated, unfit, invalid, least)
    return Found(best[4], best[0], best[3], costed, dominated, unfit, invalid, least)


def _structure(shape, batch, cost_of, capacity):
    """The best option pair of one structure (and, without stages, of its
    gradient accumulations when nothing fits the whole batch)."""
    out = None
    costed = dominated = unfit = invalid = 0
    least = float("inf")
    micro = shape.microbatch
    while True:
        s = replace(shape, microbatch=micro)
        fits = []  # (cost, memory) of the pairs that fit
        for zero, rec in grid(s):
            std = replace(s, zero=zero, recompute=rec)
            rec_i = RECOMPUTE.index(rec)
            # a pair that fits and is no slower, with no more memory than this one can have, dominates it
            if any(_dominates(f_z, f_r, zero, rec_i) for f_z, f_r, _, _ in fits):
                dominated += 1
                continue
            try:
                cost, memory = cost_of(std)
            except InputError:
                invalid += 1
                break  # the structure itself cannot be taken: no option changes that
            costed += 1
            least = min(least, memory)
            if capacity is not None and memory > capacity:
                unfit += 1
                continue
            fits.append((zero, rec_i, cost, memory))
            key = (cost, zero, rec_i, memory, std)
            if out is None or key[:3] < out[:3]:
                out = key
        if out is not None or s.pp > 1 or micro % 2 or invalid:
            break
        micro //= 2  # gradient accumulation: half the samples at a time
    return out, costed, dominated, unfit, invalid, least


def _dominates(f_zero: int, f_rec: int, zero: int, rec: int) -> bool:
    """Whether a fitting pair (``f_zero``, ``f_rec``) makes the pair
    (``zero``, ``rec``) not worth costing: stages 0 to 2 take the same time
    (a higher one only saves memory), recomputation only adds time; stage 3
    may be faster or slower than 0-2 (its weight gathers overlap the forward
    pass too), so it is compared only with itself."""
    return f_rec <= rec and (f_zero == 3) == (zero == 3)
