"""The flags reference, ``docs/flags.md``, written from the settings'
declarations (:data:`settings.DECLARED`, the cluster's :data:`cluster.FIELDS`)
through the parser made from them, so that it lists exactly what
``scheduler.py --help`` shows, grouped as the parser groups them.

Regenerate the page with::

    python -m cli.flags_reference > docs/flags.md

``tests/test_docs.py`` fails, naming that command, when the page differs.
"""

from __future__ import annotations

import sys

from cli.args import PROG, build_parser
from settings import CLUSTER_SETTINGS, DECLARED, MODEL_PARAMS, OPTION_SETTINGS, SWEEPABLE

COMMAND = "python -m cli.flags_reference > docs/flags.md"

#: how the parser's main group is divided on the page, by what each setting declares
SECTIONS = (
    ("The model and the devices", "what is planned: the network, its sizes and the number of devices"),
    ("The cluster", "the machine: each of these is also a key of a cluster file (`--cluster`), named in the "
     "last column"),
    ("Execution options and pipelines", "recomputation, ZeRO and pipeline stages, per operator or block"),
    ("The run", "what to do (search, evaluate, compare, calibrate) and what to write"),
)


def _section(setting) -> int:
    """Which of :data:`SECTIONS` a declared setting belongs to."""
    if setting.name in CLUSTER_SETTINGS:
        return 1
    if setting.name in OPTION_SETTINGS or setting.kind in ("count_auto", "schedule"):
        return 2
    if setting.name in ("graph", "procs", *MODEL_PARAMS):
        return 0
    return 3


def _cell(text: str) -> str:
    """Text in a Markdown table's cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _value(parser, action) -> str:
    """The value a flag takes, as ``--help`` writes it (nothing for a switch)."""
    if action.nargs == 0:
        return ""
    return parser._get_formatter()._format_args(action, action.dest.upper())


def _table(parser, rows, key_column: bool) -> list[str]:
    head = "| flag | value | list | meaning |" + (" file key |" if key_column else "")
    rule = "|---|---|:---:|---|" + ("---|" if key_column else "")
    out = [head, rule]
    for action, setting in rows:
        flags = ", ".join(f"`{f}`" for f in action.option_strings)
        value = _value(parser, action)
        listed = "yes" if setting is not None and setting.name in SWEEPABLE else ""
        line = f"| {flags} | {f'`{_cell(value)}`' if value else ''} | {listed} | {_cell(action.help)} |"
        if key_column:
            line += f" `{setting.name}` |"
        out.append(line)
    return out


def reference() -> str:
    """The text of ``docs/flags.md``."""
    parser = build_parser()
    by_dest = {s.name: s for s in DECLARED}
    out = ["# Flags", "",
           f"<!-- Written by `{COMMAND}` from the settings' declarations (settings.py, cluster/__init__.py); "
           "do not edit by hand. -->", "",
           f"Every flag of `{PROG}`, grouped as `--help` groups them. \"list\" marks a flag that takes a "
           "comma-separated list of values: every combination is run, one row each (a sweep, see "
           "[studies](studies.md)). Defaults are in the meaning; a value left out takes the model's, the "
           "device preset's, the cluster file's or the strategy file's, or else the paper's "
           "([cluster](cluster.md#what-overrides-what)).", ""]
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if a.option_strings]
        if not actions:
            continue
        out += [f"## {group.title[:1].upper()}{group.title[1:]}", ""]
        if group.description:
            out += [" ".join(group.description.split()), ""]
        rows = [(a, by_dest.get(a.dest)) for a in actions]
        plain = [r for r in rows if r[1] is None]  # --help
        if plain:
            out += _table(parser, plain, False) + [""]
        declared = [r for r in rows if r[1] is not None]
        sections = sorted({_section(s) for _, s in declared})
        for i in sections:
            part = [r for r in declared if _section(r[1]) == i]
            if len(sections) > 1:
                title, what = SECTIONS[i]
                out += [f"### {title}", "", f"{what[0].upper()}{what[1:]}.", ""]
            out += _table(parser, part, i == 1) + [""]
    return "\n".join(out).rstrip("\n") + "\n"


def main() -> int:
    sys.stdout.write(reference())
    return 0


if __name__ == "__main__":
    sys.exit(main())
