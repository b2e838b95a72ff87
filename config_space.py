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

import math
import operator
from functools import lru_cache
from math import prod as prod_

import numpy as np

from errors import InputError

__all__ = ["divisors", "divisors_upto", "dimension_splits", "enumerate_configs", "count_configs", "contiguous",
           "configurations", "count_configurations", "in_space"]


#: below this, Miller-Rabin with the primes up to 41 as bases decides primality exactly
_PRIME_TEST_LIMIT = 3_317_044_064_679_887_385_961_981
_BASES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)
#: divisors up to a bound this small are found by trial division up to the bound
_TRIAL = 1 << 12


def _is_prime(n: int) -> bool:
    """Whether ``n`` (below :data:`_PRIME_TEST_LIMIT`) is prime."""
    if n < 2:
        return False
    for q in _BASES:
        if n % q == 0:
            return n == q
    d, s = n - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for a in _BASES:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def _some_factor(n: int) -> int:
    """A factor ``1 < f < n`` of an odd composite ``n`` (Pollard's rho with
    Brent's cycle finding; deterministic)."""
    for c in range(1, n):
        y, r, q, g = 2, 1, 1, 1
        x = ys = y
        while g == 1:
            x = y
            for _ in range(r):
                y = (y * y + c) % n
            k = 0
            while k < r and g == 1:
                ys = y
                for _ in range(min(128, r - k)):
                    y = (y * y + c) % n
                    q = q * abs(x - y) % n
                g = math.gcd(q, n)
                k += 128
            r *= 2
        if g == n:  # the batch overshot: step again one at a time
            g = 1
            while g == 1:
                ys = (ys * ys + c) % n
                g = math.gcd(abs(x - ys), n)
        if g != n:
            return g
    raise AssertionError(f"no factor of {n} found")  # pragma: no cover


def _prime_factors(n: int) -> dict[int, int]:
    """``{prime: exponent}`` of ``1 <= n`` below :data:`_PRIME_TEST_LIMIT`."""
    out: dict[int, int] = {}
    for q in range(2, 64):
        while n % q == 0:
            out[q] = out.get(q, 0) + 1
            n //= q
    stack = [n] if n > 1 else []
    while stack:
        m = stack.pop()
        if _is_prime(m):
            out[m] = out.get(m, 0) + 1
        else:
            f = _some_factor(m)
            stack += [f, m // f]
    return out


def _size(n) -> int:
    """``n`` as a Python int (exact arithmetic on numpy integers too), >= 1."""
    n = operator.index(n)
    if n < 1:
        raise InputError(f"cannot take the divisors of {n}: sizes must be >= 1")
    return n


@lru_cache(maxsize=4096)
def divisors(n: int) -> tuple[int, ...]:
    """All positive divisors of ``n`` in ascending order (from its prime
    factors, so that a dimension of 2**62 takes no time)."""
    n = _size(n)
    if n >= _PRIME_TEST_LIMIT:  # no exact primality test: trial division
        small, large = [], []
        i = 1
        while i * i <= n:
            if n % i == 0:
                small.append(i)
                if i * i != n:
                    large.append(n // i)
            i += 1
        return tuple(small + large[::-1])
    out = [1]
    for prime, exponent in _prime_factors(n).items():
        out = [d * prime ** e for d in out for e in range(exponent + 1)]
    return tuple(sorted(out))


def divisors_upto(n: int, bound: int) -> tuple[int, ...]:
    """The divisors of ``n`` that are at most ``bound``, ascending: by trial
    division up to a small bound (work bounded by it, whatever ``n``), else
    from all the divisors (found from ``n``'s prime factors)."""
    n = _size(n)
    top = min(math.floor(bound), n)
    if top < 1:
        return ()
    if top * top < n and (top <= _TRIAL or n >= _PRIME_TEST_LIMIT):
        return tuple(d for d in range(1, top + 1) if n % d == 0)
    return tuple(d for d in divisors(n) if d <= top)


def dimension_splits(size: int, p: int, cutoff: int) -> tuple[int, ...]:
    """Ways to split one dimension of ``size``: divisors ``e <= p`` with
    ``size / e >= cutoff``, or ``(1,)`` when there are none.  Only divisors
    up to ``p`` are looked for, so that the work is bounded by ``p``."""
    splits = tuple(e for e in divisors_upto(size, p) if size >= cutoff * e)
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

