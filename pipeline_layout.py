"""How a pipeline's stages split a model: the blocks each stage holds
(as evenly as they divide, or as the framework splits them), the model
chunks of the interleaved schedule within a stage, and where a stage's
operators begin and end.  :mod:`pipeline` costs the stages these cut."""

from __future__ import annotations

import itertools
import math

from errors import InputError

__all__ = ["stage_ranges", "unblocked_error", "crossings", "sent_on", "bottleneck_ranges", "chunking_error",
           "stage_blocks", "chunk_share", "chunk_sizes", "stage_chunk_sizes", "chunk_ranges", "block_layers",
           "split_counts", "counts_ends", "cut_as_framework", "partitions", "balanced_ranges"]


def stage_ranges(n_nodes: int, chain, counts) -> list[tuple[int, int]]:
    """The node ranges ``[lo, hi)`` of stages holding ``counts`` blocks of
    ``chain`` each: what precedes the blocks goes to the first stage, what
    follows to the last."""
    out, lo, k = [], 0, 0
    for i, c in enumerate(counts):
        k += c
        hi = n_nodes if i == len(counts) - 1 else chain.start + k * chain.size
        out.append((lo, hi))
        lo = hi
    return out


def unblocked_error(name: str) -> str:
    """Why a graph without repeated blocks (``name``) cannot run the
    interleaved schedule."""
    return f"the interleaved schedule splits stages into chunks of blocks; {name} has no repeated blocks"


def chunking_error(counts, schedule, ends: bool = False) -> str | None:
    """Why stages of ``counts`` blocks cannot run ``schedule`` (``None``:
    they can): the interleaved schedule's ``v`` model chunks need ``v``
    blocks in each stage; with ``ends`` (the embedding and the loss counted
    as layers, :func:`counts_ends`), ``v - 1`` in the first and the last,
    whose chunk of no block holds the embedding or the loss."""
    if schedule.name != "interleaved":
        return None
    v = schedule.chunks
    need = [v] * len(counts)
    if ends and len(counts) > 1:
        need[0] = need[-1] = v - 1
    if all(c >= n for c, n in zip(counts, need)):
        return None
    return (f"interleaved:{v} needs at least {v} blocks in each stage, not {min(counts)} of the {sum(counts)} over "
            f"{len(counts)} stages")


def stage_blocks(chain, lo: int, hi: int) -> tuple[int, int]:
    """The whole blocks of ``chain`` the stage ``[lo, hi)`` holds: the
    indices ``[first, last)``."""
    end = chain.start + chain.count * chain.size
    first = max(0, -(-(lo - chain.start) // chain.size))  # the stage's first whole block
    last = min(chain.count, (min(hi, end) - chain.start) // chain.size)  # one past its last
    return first, max(first, last)


def _block_spans(chain, lo: int, hi: int, v: int) -> list[tuple[int, int]]:
    """The blocks (indices ``[a, b)`` of ``chain``'s) of each of the ``v``
    model chunks of the stage ``[lo, hi)`` (:func:`chunk_ranges`); a stage
    of ``v - 1`` blocks that holds operators before the chain (the
    embedding) or after it (the head and the loss) keeps them in a chunk of
    no block, its first or its last (:func:`stage_chunk_sizes`)."""
    first, last = stage_blocks(chain, lo, hi)
    n = last - first
    end = chain.start + chain.count * chain.size
    before, after = first == 0 and lo < chain.start, last == chain.count and hi > end
    if n < v and not (n == v - 1 and (before or after)):
        raise InputError(f"a stage of {n} block{'' if n == 1 else 's'} cannot hold {v} model chunks")
    out, a = [], first
    for c in stage_chunk_sizes(n, v, last=after and not before):
        out.append((a, a + c))
        a += c
    return out


def chunk_share(counts, v: int, ends: bool = False) -> float | None:
    """The largest model chunk's share of its stage's blocks, over stages of
    ``counts`` blocks split into ``v`` chunks (:func:`chunk_sizes`):
    ``None`` where every chunk holds ``1 / v`` of its stage; with ``ends``
    (:func:`counts_ends`) the embedding and the loss count as a block of
    the first and the last stage (126 layers over 8 stages of 8 chunks:
    two of 16 on every stage)."""
    counted = list(counts)
    if ends and len(counted) > 1:
        counted[0] += 1
        counted[-1] += 1
    if v == 1 or all(c % v == 0 for c in counted):
        return None
    return max(max(chunk_sizes(c, v)) / c for c in counted)


def chunk_sizes(blocks: int, v: int) -> list[int]:
    """The blocks of each of a stage's ``v`` model chunks: as even as they
    divide, the last chunks taking one more (an earlier chunk is held for
    more micro-batches: 15 blocks into 7 and 8)."""
    return _even(blocks, v)[::-1]


def stage_chunk_sizes(blocks: int, v: int, last: bool = False) -> list[int]:
    """:func:`chunk_sizes`, but for a stage of fewer blocks than chunks
    (``v - 1``: :func:`counts_ends`) the chunk of no block is the last
    stage's last (``last``: the loss alone), the first stage's first (the
    embedding alone)."""
    sizes = chunk_sizes(blocks, v)
    return sizes[::-1] if last and blocks < v else sizes


def chunk_ranges(chain, lo: int, hi: int, v: int) -> list[tuple[int, int]]:
    """The node ranges ``[a, b)`` of the ``v`` model chunks of the stage
    ``[lo, hi)`` (which holds whole blocks of ``chain``): its blocks split
    as evenly as they divide (:func:`chunk_sizes`: the last chunks take one
    more), what precedes its first block in the first chunk, what follows
    its last in the last.  An :class:`InputError` when it holds fewer blocks than
    chunks."""
    out, a = [], lo
    for j, (_, k) in enumerate(_block_spans(chain, lo, hi, v)):
        b = hi if j == v - 1 else chain.start + k * chain.size
        out.append((a, b))
        a = b
    return out


def _even(N: int, pp: int) -> list[int]:
    return [N // pp + (1 if i < N % pp else 0) for i in range(pp)]


def block_layers(g, chain) -> int:
    """How many of the model's layers one block of ``chain`` holds: the
    distinct first parts of its operators' names (``layer3/attn/qkv``:
    ``layer3``); a block of layers that alternate kinds holds two."""
    from graph import operators

    ops = operators(g)
    return len({ops[i].name.split("/", 1)[0] for i in chain.block(0)})


def split_counts(blocks: int, pp: int, v: int = 1, framework=None, layers: int = 1) -> list[int]:
    """Blocks per stage of a standard configuration's ``pp`` stages of
    ``v`` model chunks each: as evenly as they divide, the first stages
    taking one more; or, where :func:`counts_ends` (the embedding and the
    loss counted as a layer each), the first and last stages one block
    fewer than the others (Llama 3.1 405B's 126 layers over 8 stages are
    15, 16, ..., 16, 15)."""
    if counts_ends(blocks, pp, v, framework, layers):
        counts = [(blocks + 2) // pp] * pp
        counts[0] -= 1
        counts[-1] -= 1
        return counts
    return _even(blocks, pp)


def counts_ends(blocks: int, pp: int, v: int = 1, framework=None, layers: int = 1) -> bool:
    """Whether the framework splits ``blocks`` blocks (of ``layers`` layers
    each) over ``pp`` stages of ``v`` chunks with the embedding and the
    loss counted as a layer each: its ``pipeline_split`` is
    ``embedding_loss`` (Megatron-LM's
    ``--account-for-embedding-in-pipeline-split`` and
    ``--account-for-loss-in-pipeline-split``, which its recipes set for
    such models), each block is one layer, and the layers do not divide
    over the ``pp v`` chunks where ``blocks + 2`` does.  A chunk of one
    layer then leaves the first stage's first chunk the embedding alone and
    the last stage's last chunk the loss alone (Megatron Bridge's Llama
    3.1 405B on 16 stages of 8 chunks)."""
    return (framework is not None and framework.pipeline_split == "embedding_loss" and pp > 1 and layers == 1
            and blocks % (pp * v) != 0 and (blocks + 2) % (pp * v) == 0)


def cut_as_framework(counts, v: int, framework, layers: int = 1) -> bool:
    """Whether stages of ``counts`` blocks are the framework's split with
    the embedding and the loss counted as layers (:func:`counts_ends`)."""
    split = (sum(counts), len(counts), v, framework, layers)
    return counts_ends(*split) and list(counts) == split_counts(*split)


def partitions(N: int, pp: int) -> list[tuple[int, ...]]:
    """Block counts per stage: even shares, the first and the last stage
    taking up to two fewer or one more."""
    out = {tuple(_even(N, pp))}
    if pp == 1:
        return [(N,)]
    base = N // pp
    for d0 in range(-2, 2):
        for d1 in range(-2, 2):
            first, last = base + d0, base + d1
            rest = N - first - last
            if first < 0 or last < 0 or rest < 0 or (pp > 2 and rest < pp - 2) or (pp == 2 and rest != 0):
                continue
            out.add((first,) + tuple(_even(rest, pp - 2)) + (last,) if pp > 2 else (first, last))
    return sorted(out)


def _read_last(g) -> dict:
    """Each tensor an operator makes and a later one reads, ``(u, out)``:
    ``(the last operator that reads it, its elements)``."""
    last: dict = {}
    for u, v, d in g.edges(data=True):
        if v > u:
            key = (u, d["out"])
            last[key] = max(last.get(key, v), v)
    return {key: (end, float(g.nodes[key[0]]["op"].outputs[key[1]].size)) for key, end in last.items()}


def crossings(g) -> list[float]:
    """For each place ``v`` (0 to the number of operators) a cut before
    operator ``v`` could take, the elements of the tensors it would cut:
    made before ``v`` and read at ``v`` or after (each tensor once, however
    many read it)."""
    n = g.number_of_nodes()
    diff = [0.0] * (n + 2)
    for (u, _), (end, size) in _read_last(g).items():
        diff[u + 1] += size
        diff[end + 1] -= size
    return list(itertools.accumulate(diff[:n + 1]))


def sent_on(g):
    """``sends(lo, hi)``: the elements of the tensors the stage ``[lo, hi)``
    of ``g`` makes and a later stage reads (as :func:`pipeline.evaluate`
    counts a stage's sends), each range worked out once."""
    made: dict = {}
    for (u, _), (end, size) in _read_last(g).items():
        made.setdefault(u, []).append((end, size))
    done: dict = {}

    def sends(lo: int, hi: int) -> float:
        if (lo, hi) not in done:
            done[(lo, hi)] = math.fsum(size for u in range(lo, hi) for end, size in made.get(u, ()) if end >= hi)
        return done[(lo, hi)]

    return sends


def bottleneck_ranges(weights, crossing, prices, realistic: bool) -> list[tuple[int, int]]:
    """The ``len(prices)`` contiguous non-empty ranges of the items whose
    slowest is the fastest: a range's figure its ``weights``' sum and what
    its sends cost, the elements crossing its end (``crossing``,
    :func:`crossings`: what must pass there, each read beyond it, relayed
    or not) at ``prices[k]`` each for the ``k``-th range (nothing for the
    last), the larger of the two where sends overlap computation
    (``realistic``), else their sum.  Exact over every cut (a dynamic
    program over the cut places, a vector per stage): beside the cut of
    :func:`balanced_ranges`, one that keeps a language model's logits
    with its loss, say, rather than sending them on to a stage of its
    own."""
    import numpy as np

    n, pp = len(weights), len(prices)
    if pp > n:
        raise InputError(f"{pp} stages need at least {pp} operators; the graph has {n}")
    sums = np.concatenate(([0.0], np.cumsum(np.asarray(weights, dtype=float))))
    cross = np.asarray(crossing, dtype=float)
    work = sums[None, :] - sums[:, None]  # [start, end): the items' sum
    later = np.arange(n + 1)[None, :] > np.arange(n + 1)[:, None]
    best = np.where(np.arange(n + 1) == 0, 0.0, np.inf)  # the slowest of the ranges so far, ending at each place
    choice = []
    for k, price in enumerate(prices):
        sends = cross * price if k < pp - 1 else np.zeros(n + 1)
        figure = np.maximum(work, sends[None, :]) if realistic else work + sends[None, :]
        total = np.where(later, np.maximum(best[:, None], figure), np.inf)
        choice.append(np.argmin(total, axis=0))
        best = total[choice[-1], np.arange(n + 1)]
    if not np.isfinite(best[n]):  # costs beyond any figure: the balanced cut
        return balanced_ranges(weights, pp)
    bounds = [n]
    for k in range(pp - 1, -1, -1):
        bounds.append(int(choice[k][bounds[-1]]))
    bounds.reverse()
    return [(bounds[j], bounds[j + 1]) for j in range(pp)]


def balanced_ranges(weights, pp: int) -> list[tuple[int, int]]:
    """``pp`` contiguous non-empty ranges of the items whose ``weights``
    (in order) sum as evenly as the cuts allow: each cut where the running
    sum first reaches its share of the total."""
    n = len(weights)
    if pp > n:
        raise InputError(f"{pp} stages need at least {pp} operators; the graph has {n}")
    total = math.fsum(weights)
    cuts, acc, k = [], 0.0, 1
    for v, w in enumerate(weights):
        acc += w
        while k < pp and acc >= total * k / pp and len(cuts) < pp - 1:
            cuts.append(v + 1)
            k += 1
    bounds = [0]
    for j in range(pp - 1):  # every stage non-empty, each cut after the one before and room for the rest
        c = cuts[j] if j < len(cuts) else n - (pp - 1 - j)
        bounds.append(min(max(c, bounds[-1] + 1), n - (pp - 1 - j)))
    bounds.append(n)
    return [(bounds[j], bounds[j + 1]) for j in range(pp)]
