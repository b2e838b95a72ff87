"""config_space.py: enumeration against a brute-force reading of the rules."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from config_space import (
    configurations,
    contiguous,
    count_configs,
    count_configurations,
    dimension_splits,
    divisors,
    divisors_upto,
    enumerate_configs,
)


def brute_force(space, p, cutoff, never_split=()):
    lists = []
    for i, d in enumerate(space):
        ok = [e for e in range(1, d + 1) if d % e == 0 and d / e >= cutoff and i not in never_split]
        lists.append(ok or [1])
    return [c for c in itertools.product(*lists) if math.prod(c) <= p]


class TestDivisors:
    def test_small(self):
        assert divisors(1) == (1,)
        assert divisors(12) == (1, 2, 3, 4, 6, 12)
        assert divisors(49) == (1, 7, 49)
        assert divisors(97) == (1, 97)

    def test_rejects_zero(self):
        with pytest.raises(ValueError, match="sizes must be >= 1"):
            divisors(0)

    @pytest.mark.parametrize(
        "size, p, cutoff, expected",
        [(128, 64, 4, (1, 2, 4, 8, 16, 32)), (3, 64, 4, (1,)), (3, 64, 1, (1, 3)),
         (27, 64, 4, (1, 3)), (96, 6, 4, (1, 2, 3, 4, 6)), (1, 8, 1, (1,))],
    )
    def test_dimension_splits(self, size, p, cutoff, expected):
        assert dimension_splits(size, p, cutoff) == expected


def trial_divisors(n):
    return tuple(sorted({d for i in range(1, math.isqrt(n) + 1) if n % i == 0 for d in (i, n // i)}))


class TestHugeDimensions:
    """Only the divisors up to p are looked for: a dimension of 2**62 takes
    no 2**31 trial divisions, and the splits are those of the definition."""

    @settings(max_examples=300, deadline=None)
    @given(st.integers(1, 10**6), st.integers(1, 512), st.integers(0, 64))
    def test_splits_are_the_definition(self, size, p, cutoff):
        want = tuple(e for e in range(1, p + 1) if size % e == 0 and size / e >= cutoff) or (1,)
        assert dimension_splits(size, p, cutoff) == want
        assert divisors_upto(size, p) == tuple(e for e in range(1, p + 1) if size % e == 0)

    @settings(max_examples=200, deadline=None)
    @given(st.integers(1, 10**7), st.integers(1, 10**5), st.integers(0, 64))
    def test_splits_on_many_devices(self, size, p, cutoff):
        """Beyond a few thousand devices the splits come from all the divisors."""
        want = tuple(e for e in trial_divisors(size) if e <= p and size / e >= cutoff) or (1,)
        assert dimension_splits(size, p, cutoff) == want

    @settings(max_examples=300, deadline=None)
    @given(st.integers(1, 10**6))
    def test_divisors_are_those_found_by_trial(self, size):
        assert divisors(size) == trial_divisors(size)

    @pytest.mark.parametrize("n", [67**2, 67**3 * 2, 4099**2, 65537 * 65539, 999983**2,
                                   2 * 3 * 5 * 7 * 11 * 13 * 17 * 19, 10**6 * 999983])
    def test_divisors_of_large_prime_factors(self, n):
        assert divisors(n) == trial_divisors(n)

    def test_a_dimension_of_2_to_the_62(self):
        size = 2**62 * 3
        assert dimension_splits(size, 64, 4) == (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
        assert dimension_splits(size, 64, 2**62) == (1, 2, 3)
        assert len(enumerate_configs((128, size), 64, 4)) == count_configs((128, size), 64, 4)
        assert divisors(size) == tuple(sorted(2**i * 3**j for i in range(63) for j in range(2)))
        for n in (2**61 - 1, 4611686018427387847, (2**31 - 1) ** 2, 3037000493 * 3037000453):  # primes, semiprimes
            assert len(divisors(n)) in (2, 3, 4) and dimension_splits(n, 64, 4) == (1,)

    def test_the_baselines_fit_a_huge_dimension(self):
        from baselines import fit

        assert fit(2**62 * 3, 64) == 64 and fit(2**62 * 3, 7) == 6 and fit(4611686018427387847, 64) == 1


class TestEnumerate:
    @pytest.mark.parametrize("p", [1, 2, 3, 6, 7, 12, 16, 24, 64, 100])
    @pytest.mark.parametrize("cutoff", [1, 4])
    def test_equals_brute_force_in_order(self, p, cutoff):
        for space, never in [((128, 3, 55, 55, 11, 11, 96), (2, 3)), ((12, 30, 7), ()),
                             ((2, 256, 24, 2048, 2048), (1,)), ((1, 128, 8, 256, 64), (0,))]:
            got = enumerate_configs(space, p, cutoff, never)
            assert [tuple(c) for c in got.tolist()] == brute_force(space, p, cutoff, never)
            assert got.dtype == np.int64 and got.shape[1] == len(space)

    def test_p1_has_only_the_unsplit_configuration(self):
        assert enumerate_configs((128, 96, 27, 27), 1, 4).tolist() == [[1, 1, 1, 1]]

    def test_rejects_bad_p(self):
        with pytest.raises(ValueError, match="p must be >= 1"):
            enumerate_configs((4, 4), 0, 1)


class TestContiguous:
    def test_mask(self):
        space = (4, 6, 5)
        configs = np.array([[1, 1, 1], [2, 1, 1], [4, 1, 1], [4, 2, 1], [4, 6, 5], [2, 2, 1],
                            [1, 1, 5], [4, 6, 1], [4, 1, 5]])
        assert contiguous(configs, space).tolist() == [True, True, True, True, True, False, False,
                                                       True, False]

    def test_reshape_enumeration_keeps_contiguous_only(self):
        got = enumerate_configs((8, 4, 2), 16, 1, contiguous_only=True).tolist()
        assert got == [[1, 1, 1], [2, 1, 1], [4, 1, 1], [8, 1, 1], [8, 2, 1]]


class TestCount:
    @pytest.mark.parametrize("p", [1, 2, 3, 7, 12, 64, 100])
    @pytest.mark.parametrize("cutoff", [1, 4])
    def test_equals_the_enumeration(self, p, cutoff):
        for space, never in [((128, 3, 55, 55, 11, 11, 96), (2, 3)), ((12, 30, 7), ()),
                             ((2, 256, 24, 2048, 2048), (1,)), ((1, 128, 8, 256, 64), (0,))]:
            for contiguous_only in (False, True):
                want = len(enumerate_configs(space, p, cutoff, never, contiguous_only))
                assert count_configs(space, p, cutoff, never, contiguous_only) == want

    @pytest.mark.parametrize("p", [1, 5, 16, 64, 1000])
    def test_every_operator_of_the_built_in_graphs(self, p):
        from graph import operators
        from models import build_graph

        for name in ("alexnet", "resnet101", "inception3", "rnnlm", "transformer"):
            g = build_graph(name)
            for op in set(operators(g)):
                assert count_configurations(op, p, g.graph["cutoff"]) == len(configurations(op, p, g.graph["cutoff"]))

    def test_counts_without_enumerating(self):
        # four dimensions of 2^10 3^5 5^3 on 10^6 devices: millions of configurations, counted at once
        assert count_configs((2**10 * 3**5 * 5**3,) * 4, 10**6, 1) == 4038172
