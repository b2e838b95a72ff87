"""The tool's own errors for bad input, phrased without command-line flags.

The library raises :class:`SettingError` naming the setting (``flops``,
``batch``); the command line reports it under its flag (``--flops``, ``-b``).
"""

from __future__ import annotations

import math


class InputError(ValueError):
    """Input the tool cannot use (a setting, a file, a model): the user's to
    fix, reported in one line.  Any other exception is the tool's own bug."""


class SettingError(InputError):
    """A setting with a value the tool cannot use: ``f"{name} {problem}"``."""

    def __init__(self, name: str, problem: str):
        super().__init__(f"{name} {problem}")
        self.name = name
        self.problem = problem

    def __reduce__(self):  # picklable, so that a sweep's worker can return it
        return (type(self), (self.name, self.problem))


def printable(text: str) -> str:
    """``text`` on one line with nothing a terminal acts on: each character
    that is not printable (line breaks, tabs, escape codes, bidirectional
    overrides) written as Python writes it in a string, ``\\x1b``; other
    characters, letters like ``é`` among them, kept."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def shown(value, limit: int = 40) -> str:
    """``repr(value)``, cut to ``limit`` characters for a one-line message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def plain(x: float, digits: int = 6) -> str:
    """``x`` to ``digits`` significant digits as ``:g`` writes it (``989.5``,
    ``0.45``), from 1,000 up with its thousands marked and never with an
    exponent (``1,979.5``, ``1,500,000``, not ``1.5e+06``)."""
    text = f"{x:.{digits}g}"
    if abs(x) < 1000 or not math.isfinite(x):
        return text
    v = float(text)
    frac = text.partition(".")[2] if "e" not in text else ""
    return ("-" if v < 0 else "") + f"{int(abs(v)):,}" + (f".{frac}" if frac else "")
