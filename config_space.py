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

What a plan decides for one operator is a :class:`Decision`: its
configuration, named by letter, and its execution options (see
``options/``).  :meth:`Decision.of` is the one place a configuration given
from outside (a strategy file, a baseline, a standard configuration) is
checked against its operator.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from functools import lru_cache
from math import prod as prod_

import numpy as np

from errors import InputError

__all__ = ["divisors", "divisors_upto", "dimension_splits", "enumerate_configs", "count_configs", "contiguous",
           "configurations", "count_configurations", "in_space", "Decision"]


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



@dataclass(frozen=True)
class Decision:
    """What a plan decides for one operator: how many ways each dimension
    of its iteration space is split, by letter, and its execution options
    (``options/``: activation recomputation, ZeRO stage ...), those not at
    their default as sorted ``(name, value)`` pairs.

        >>> d = Decision("bnk", (8, 2, 4), (("zero", 3),))
        >>> d["n"], d.devices, d
        (2, 64, (b=8, n=2, k=4; zero=3))

    Built from outside values with :meth:`of`, which checks them; the
    search builds them from its own arrays.
    """

    dims: str
    config: tuple[int, ...]
    options: tuple[tuple[str, object], ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "config", tuple(int(c) for c in self.config))
        object.__setattr__(self, "options", tuple(sorted(self.options)))

    def __getitem__(self, letter: str) -> int:
        return self.config[self.dims.index(letter)]

    def option(self, name: str):
        """The value of option ``name`` (its default when not set)."""
        from options import OPTIONS

        return dict(self.options).get(name, OPTIONS[name].default)

    def with_options(self, **values) -> "Decision":
        """The same splits with these options (a default value removes one)."""
        from options import OPTIONS

        merged = dict(self.options)
        for name, value in values.items():
            if value == OPTIONS[name].default:
                merged.pop(name, None)
            else:
                merged[name] = value
        return Decision(self.dims, self.config, tuple(merged.items()))

    @property
    def devices(self) -> int:
        """Devices the configuration uses: the product of the splits."""
        return prod_(self.config)

    def __repr__(self) -> str:
        splits = ", ".join(f"{d}={c}" for d, c in zip(self.dims, self.config))
        opts = ", ".join(f"{k}={v}" for k, v in self.options)
        return f"({splits}{'; ' + opts if opts else ''})"

    @classmethod
    def of(cls, op, config, p: int | None = None, options=(), where: str | None = None) -> "Decision":
        """The decision ``config`` (one split per dimension of ``op``, in
        the order of ``op.dims``) and ``options`` make for ``op``, checked:
        positive integer splits, as many as dimensions, dividing the sizes,
        a reshape's split contiguous, at most ``p`` devices, and options
        known and valid for the operator.  ``where`` names the operator in
        the messages (default: its name)."""
        where = where or op.name
        try:
            cfg = tuple(config)
        except TypeError:
            raise InputError(f"{where}: configuration {config!r} is not a list of integers") from None
        if len(cfg) != len(op.space):
            raise InputError(f"{where}: configuration {cfg} has {len(cfg)} entries; its space {op.space} has "
                             f"{len(op.space)}")
        if not all(isinstance(c, (int, np.integer)) and not isinstance(c, bool) and c >= 1 for c in cfg):
            raise InputError(f"{where}: configuration {cfg} must hold integers >= 1")
        if any(d % c for d, c in zip(op.space, cfg)):
            raise InputError(f"{where}: configuration {cfg} does not divide its space {op.space}")
        if op.contiguous_only and not contiguous(np.asarray([cfg]), op.space)[0]:
            raise InputError(f"{where}: configuration {cfg} splits a reshape into pieces that are not contiguous "
                             f"blocks of the flattened tensor, which the cost model cannot price; split "
                             f"{op.dims} from the left (every dimension whole before the first one split "
                             "partly, the later ones unsplit)")
        if p is not None and prod_(cfg) > p:
            raise InputError(f"{where}: configuration {cfg} uses {prod_(cfg)} devices but p is {p}")
        from options import check_options

        return cls(op.dims, cfg, check_options(op, dict(options), where))
