"""The machine a plan runs on: device speed and the network between devices.

A :class:`Cluster` is one immutable value passed down to every cost formula;
the collectives are its methods, so how a group of devices communicates is
decided here and nowhere else.  Every cost is in FLOP: moving one element
costs ``word`` FLOP, the time the device could have computed instead
(``word_bytes * 1000 * flops / bw``: 5000 with the defaults, the PaSE
paper's 8-byte word at 10 TFLOPS and 16 GB/s).

Group arguments: a configuration's splits ``C`` (a
:class:`kinds.Extents` of K rows) and the letters of the dimensions whose
devices take part, e.g. ``allreduce(words, C, "k")`` reduces among the
``C["k"]`` devices that split ``k`` and hold the same piece of everything
else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from errors import SettingError, shown

__all__ = ["Cluster"]

MAX_WORD_COST = 1e15
MIN_WORD_COST = 1e-9


def _positive(name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v < math.inf):
        raise SettingError(name, f"must be a positive finite number, got {shown(v)}")
    return float(v)


@dataclass(frozen=True)
class Cluster:
    """Identical devices of ``flops`` peak TFLOPS joined by links of ``bw``
    GB/s, one element being ``word_bytes`` bytes."""

    flops: float = 10.0
    bw: float = 16.0
    word_bytes: int = 8

    def __post_init__(self):
        object.__setattr__(self, "flops", _positive("flops", self.flops))
        object.__setattr__(self, "bw", _positive("bw", self.bw))
        if not MIN_WORD_COST <= self.word <= MAX_WORD_COST:
            raise SettingError(
                "flops and bw",
                f"({self.flops:g} TFLOPS, {self.bw:g} GB/s) make one word cost {self.word:.3g} FLOP; "
                "the model needs 1e-9 to 1e15 (flops in TFLOPS, bw in GB/s)")

    @property
    def word(self) -> float:
        """``W``: FLOP equivalent of moving one element."""
        return self.word_bytes * 1000.0 * self.flops / self.bw

    def seconds(self, flop):
        """Time of ``flop`` FLOP (computed, or equivalent to data moved)."""
        return flop / (self.flops * 1e12)

    def describe(self) -> str:
        return f"{self.flops:g} TFLOPS and {self.bw:g} GB/s per device"

    # -- collectives ---------------------------------------------------------------

    def allreduce(self, words, C, letters: str):
        """Ring all-reduce of ``words`` among the ``q = C[letters]`` devices:
        ``W * words/q * 2(q - 1)`` (zero when ``q = 1``)."""
        q = C[letters]
        return self.word * (words / q) * 2.0 * (q - 1.0)

    def send(self, words, C, letters: str):
        """Each device sends ``words`` to the devices that differ from it only
        in the ``letters`` coordinates (nothing when there are none)."""
        q = C[letters]
        return np.where(q > 1, self.word * words, 0.0)

    def redistribute(self, words):
        """A device receives ``words`` from others when a tensor changes split."""
        return self.word * words
