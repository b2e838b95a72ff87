"""The tool's own errors for bad input, phrased without command-line flags.

The library raises :class:`SettingError` naming the setting (``flops``,
``batch``); the command line reports it under its flag (``--flops``, ``-b``).
"""

from __future__ import annotations


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
