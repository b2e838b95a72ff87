"""The command line's flags: the parser, made from the settings'
declarations (:data:`settings.DECLARED`), and the :class:`settings.Settings`
it turns them into before any work.  Numbers are ASCII digits; a value that
looks like an option (``--flops -inf``) is read as the flag's value."""

from __future__ import annotations

import argparse
import os
import re
import sys

from errors import InputError, SettingError, shown
from cluster import _BOUNDS, shown_number
from cluster import FIELDS as CLUSTER_FIELDS
from settings import DECLARED, SWEEPABLE, Settings, flag_of

DOT_FILE = "graph.dot"
PROG = "scheduler.py"


class UsageError(InputError):
    """A bad command line or input file: reported in one line."""


def message(e: Exception) -> str:
    """The one line a user sees: a setting's error under its flag."""
    if isinstance(e, SettingError):
        return f"{flag_of(e.name)} {e.problem}"
    return str(e) or type(e).__name__


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage block
        self.exit(2, f"{self.prog}: error: {message}\n")


_INT = re.compile(r"[+-]?[0-9]{1,30}")  # ASCII digits only (int() would take '8_0' and Arabic-Indic digits)
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?(inf|infinity|nan)", re.IGNORECASE)
MAX_FLOAT = 1e12  # largest --flops, --bw, --mem-limit: far beyond any machine


def _float(text: str) -> float:
    if len(text) > 40 or not _FLOAT.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a number")
    return float(text)


def _positive_float(text: str) -> float:
    v = _float(text)
    if not (0 < v <= MAX_FLOAT):
        raise argparse.ArgumentTypeError(f"must be a number above 0 and at most {shown_number(MAX_FLOAT)}, "
                                         f"got {shown(text)}")
    return v


def _nonnegative_float(text: str) -> float:
    v = _float(text)
    if not (0 <= v <= 1e6):
        raise argparse.ArgumentTypeError(f"must be a number from 0 to 1,000,000, got {shown(text)}")
    return v


def _device(text: str) -> str:
    """A device preset's name, in the presets' spelling."""
    from cluster.presets import known

    try:
        return known(text).name
    except SettingError as e:
        raise argparse.ArgumentTypeError(e.problem) from None


def _jobs(text: str) -> int:
    v = _int(text)
    if not 1 <= v <= 256:
        raise argparse.ArgumentTypeError(f"must be from 1 to 256, got {v}")
    return v


def _int(text: str) -> int:
    if not _INT.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{shown(text)} is not an integer (ASCII digits, at most 30)")
    return int(text)


def _listed(convert):
    """An argparse type: one value, or a comma-separated list of them (a
    sweep), as a tuple; empty items and repeated values are refused."""

    def parse(text: str) -> tuple:
        if convert is str and os.path.exists(text):  # a model file whose name has a comma
            return (text,)
        items = text.split(",")
        if len(items) > 1 and any(not item.strip() for item in items):
            raise argparse.ArgumentTypeError(f"{shown(text)} has an empty item")
        values = tuple(convert(item.strip() if len(items) > 1 else item) for item in items)
        for i, v in enumerate(values):
            if v in values[:i]:
                raise argparse.ArgumentTypeError(f"{shown(items[i])} appears twice in {shown(text)}")
        return values

    return parse


def _one_of(convert, choices):
    def parse(text: str):
        v = convert(text)
        if v not in choices:
            raise argparse.ArgumentTypeError(f"invalid choice: {shown(text)} (choose from "
                                             f"{', '.join(map(str, choices))})")
        return v

    return parse


def _models_help(text: str) -> str:
    from models import MODELS

    return text.replace("a built-in model", ", ".join(MODELS))


def _count_or_auto(text: str):
    """A positive integer, or ``auto`` (searched)."""
    if text.strip().lower() == "auto":
        return "auto"
    v = _int(text)
    if not 1 <= v <= 10**6:
        raise argparse.ArgumentTypeError(f"must be an integer from 1 to 1,000,000 or auto, got {shown(text)}")
    return v


def _schedule(text: str) -> str:
    """A pipeline schedule, checked (``pipeline.parse_schedule``), or
    ``auto`` (searched)."""
    from pipeline import parse_schedule

    if text.strip().lower() == "auto":
        return "auto"
    try:
        return str(parse_schedule(text))
    except InputError as e:
        raise argparse.ArgumentTypeError(str(e).replace("interleaved or interleaved:V", "interleaved, "
                                                        "interleaved:V or auto")) from None


def _network(text: str) -> str:
    """A network preset's name, in the presets' spelling."""
    from cluster.presets import network

    try:
        return network(text).name
    except SettingError as e:
        raise argparse.ArgumentTypeError(e.problem) from None


def _cluster_value(name: str, kind: str):
    """The converter of a cluster field's flag: the number, checked by the
    field's own rule (:func:`cluster.check_value`), so that the flag, a
    cluster file and the library say the same."""
    from cluster import check_value

    def convert(text: str):
        v = _int(text) if kind == "count" else _float(text)
        try:
            return check_value(name, v)
        except SettingError as e:
            raise argparse.ArgumentTypeError(f"{e.problem.rsplit(', got ', 1)[0]}, got {shown(text)}") from None

    return convert


#: how each kind of declared value is read from its flag
_TYPES = {"count": _int, "positive": _positive_float, "nonnegative": _nonnegative_float, "device": _device,
          "network": _network, "precision": str, "name": str, "model": str, "path": str, "jobs": _jobs,
          "option": str, "spec": str, "count_auto": _count_or_auto, "schedule": _schedule, "export": str}


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description="Find the minimum-cost hybrid data/parameter-parallel strategy for training "
        "a DNN on p devices (PaSE, Elango, IPDPS 2021). Costs are in FLOP.",
        epilog="example: python scheduler.py -g resnet101 -p 32 --output plan.json",
        allow_abbrev=False,
    )
    groups = {"": p, "sweeps": p.add_argument_group(
        "sweeps", f"Give any of {', '.join(SWEEPABLE.values())} a comma-separated list to run every combination: "
        "one row per setting, in a table (pandas). --output then writes the table (.csv, .json or .md).")}
    for s in DECLARED:
        how = {"help": _models_help(s.help) if s.kind == "model" else s.help}
        if s.kind == "switch":
            how["action"] = "store_true"
        else:
            convert = _cluster_value(s.name, s.kind) if s.name in CLUSTER_FIELDS and s.kind in _BOUNDS else \
                _TYPES[s.kind]
            if s.choices and s.sweep:  # each item of a list is checked
                convert = _one_of(convert, s.choices)
                how["metavar"] = "{" + ",".join(map(str, s.choices)) + "}"
            elif s.choices:
                how["choices"] = s.choices
            how["type"] = _listed(convert) if s.sweep else convert
            if s.kind == "export":  # repeatable: a tuple of the values given
                how["action"] = "append"
            if s.metavar:
                how["metavar"] = s.metavar
        if s.flags[-1].lstrip("-").replace("-", "_") != s.name:
            how["dest"] = s.name
        groups[s.group].add_argument(*s.flags, **how)
    return p


def _values_first(parser, argv: list[str]) -> list[str]:
    """``--flops -inf`` as ``--flops=-inf``: argparse would read ``-inf`` as
    an option and say the flag lacks its value."""
    takes = {opt for a in parser._actions if a.nargs is None and a.option_strings for opt in a.option_strings}
    known = {opt for a in parser._actions for opt in a.option_strings}
    out, i = [], 0
    while i < len(argv):
        arg = argv[i]
        if arg in takes and i + 1 < len(argv) and argv[i + 1].startswith("-") and argv[i + 1] not in known \
                and not argv[i + 1].startswith("--"):
            out.append(f"{arg}={argv[i + 1]}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out


def parse_args(argv=None) -> Settings:
    """The settings the command line ``argv`` asks for."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    ns = parser.parse_args(_values_first(parser, argv))
    given = {k for k, v in vars(ns).items() if v is not None and v is not False}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in vars(ns).items() if v is not None}
    sweep = tuple((k, values[k]) for k in SWEEPABLE if k in values and len(values[k]) > 1)
    values.update({k: values[k][0] for k in SWEEPABLE if k in values})  # a sweep's first setting, until expanded
    return Settings(**values, sweep=sweep, explicit=frozenset(given))


