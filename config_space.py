"""Configuration space of an operator: every way to split its iteration space.

A configuration ``C = (c1..cn)`` splits dimension ``i`` of an iteration space
``D = (D1..Dn)`` into ``ci`` parts; it uses ``prod(C)`` devices.  Following the
PaSE paper (Elango, IPDPS 2021, section IV) and the original tool:

* dimension ``i`` may be split by any divisor ``e`` of ``Di`` that leaves at
  least ``cutoff`` elements per part (``Di / e >= cutoff``); if no divisor
  qualifies, only ``1``;
* a never-split dimension is enumerated as if its size were 1;
* the configurations are the cartesian product of those per-dimension lists
  (first dimension varying slowest, each list ascending) restricted to
  ``prod(C) <= p``;
* a reshape operator only admits *contiguous* configurations (see
  :func:`contiguous`).

The functions here do not check that ``space`` describes a real operator; the
order they return is deterministic and is the order every cost array uses.
"""

from __future__ import annotations

from functools import lru_cache
from math import prod as prod_

import numpy as np

from errors import InputError

__all__ = ["divisors", "dimension_splits", "enumerate_configs", "count_configs", "contiguous", "configurations",
           "count_configurations", "in_space"]


@lru_cache(maxsize=4096)
def divisors(n: int) -> tuple[int, ...]:
    """All positive divisors of ``n`` in ascending order."""
    if n < 1:
        raise InputError(f"cannot take the divisors of {n}: sizes must be >= 1")
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i * i != n:
                large.append(n // i)
        i += 1
    return tuple(small + large[::-1])


def dimension_splits(size: int, p: int, cutoff: int) -> tuple[int, ...]:
    """Ways to split one dimension of ``size``: divisors ``e <= p`` with
    ``size / e >= cutoff``, or ``(1,)`` when there are none."""
    splits = tuple(e for e in divisors(size) if e <= p and size >= cutoff * e)
    return splits or (1,)


def contiguous(configs: np.ndarray, space: tuple[int, ...]) -> np.ndarray:
    """Mask of the configurations a reshape (Ravel/Unravel) admits.

    Leading dimensions that are split completely (``ci == Di``) are skipped;
    the first one that is not may be split partly; every later dimension must
    be unsplit.  Then the flattened tensor is split into contiguous blocks.
    """
    configs = np.asarray(configs)
    full = configs == np.asarray(space)  # (K, n)
    # Position of the first dimension that is not split completely.
    first_partial = np.where(full.all(axis=1), configs.shape[1], np.argmin(full, axis=1))
    later = np.arange(configs.shape[1])[None, :] > first_partial[:, None]  # (K, n)
    return ~np.any(later & (configs != 1), axis=1)  # (K,)


def _split_lists(space, p: int, cutoff: int, never_split) -> list:
    """Each dimension's allowed splits (just 1 for a never-split one)."""
    if p < 1:
        raise InputError(f"the number of devices p must be >= 1, got {p}")
    return [(1,) if i in never_split else dimension_splits(size, p, cutoff) for i, size in enumerate(space)]


def enumerate_configs(
    space: tuple[int, ...],
    p: int,
    cutoff: int,
    never_split: tuple[int, ...] = (),
    contiguous_only: bool = False,
) -> np.ndarray:
    """All configurations of an iteration space for ``p`` devices, as an
    ``int64`` array of shape ``(K, len(space))`` in the deterministic order
    described in the module docstring."""
    lists = _split_lists(space, p, cutoff, never_split)
    # Grow the product one dimension at a time, pruning partial products > p
    # so that the intermediate arrays stay small.
    configs = np.ones((1, 0), dtype=np.int64)
    used = np.ones(1, dtype=np.int64)
    for splits in lists:
        s = np.asarray(splits, dtype=np.int64)
        prod = used[:, None] * s[None, :]  # (K, len(s))
        keep = prod <= p
        rows, cols = np.nonzero(keep)  # row-major: earlier dims vary slowest
        configs = np.concatenate([configs[rows], s[cols, None]], axis=1)
        used = prod[rows, cols]
    if contiguous_only:
        configs = configs[contiguous(configs, space)]
    return configs


def count_configs(
    space: tuple[int, ...],
    p: int,
    cutoff: int,
    never_split: tuple[int, ...] = (),
    contiguous_only: bool = False,
) -> int:
    """How many configurations :func:`enumerate_configs` returns, counted
    without making them (to estimate memory before allocating it)."""
    lists = _split_lists(space, p, cutoff, never_split)
    if contiguous_only:
        # Leading dimensions split completely, then the first one that is
        # not (any split but its size), then only 1s; or all split completely.
        total, used = 0, 1
        for size, splits in zip(space, lists):
            total += sum(1 for c in splits if c != size and used * c <= p)
            if size not in splits or used * size > p:
                return total
            used *= size
        return total + 1
    counts = {1: 1}  # devices used by the leading dimensions -> configurations
    for splits in lists:
        grown: dict[int, int] = {}
        for used, k in counts.items():
            for c in splits:
                if used * c <= p:
                    grown[used * c] = grown.get(used * c, 0) + k
        counts = grown
    return sum(counts.values())


def count_configurations(op, p: int, cutoff: int) -> int:
    """``len(configurations(op, p, cutoff))``, without enumerating them."""
    never = tuple(op.dims.index(c) for c in op.never_split)
    return count_configs(op.space, p, cutoff, never, op.contiguous_only)


def configurations(op, p: int, cutoff: int) -> np.ndarray:
    """Every configuration of an operator (see :func:`enumerate_configs`),
    with its kind's never-split letters and contiguity."""
    never = tuple(op.dims.index(c) for c in op.never_split)
    return enumerate_configs(op.space, p, cutoff, never, op.contiguous_only)


def in_space(op, cfg, p: int, cutoff: int) -> bool:
    """Whether :func:`configurations` holds ``cfg``, decided without
    enumerating: every split is one of its dimension's allowed splits, they
    use at most ``p`` devices, and a reshape's configuration is contiguous."""
    cfg = tuple(int(c) for c in cfg)
    if len(cfg) != len(op.space) or prod_(cfg) > p:
        return False
    for letter, size, c in zip(op.dims, op.space, cfg):
        allowed = (1,) if letter in op.never_split else dimension_splits(size, p, cutoff)
        if c not in allowed:
            return False
    return not op.contiguous_only or bool(contiguous(np.asarray([cfg]), op.space)[0])

