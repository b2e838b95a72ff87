"""``--export FORMAT[:PATH]`` on the command line: the exports checked
before any work, rendered once the plan is known (a format that cannot
express the plan refuses it before any file is written), and where their
text goes."""

from __future__ import annotations

import os
from dataclasses import dataclass

from cli.args import DOT_FILE, UsageError
from cli.files import check_writable

__all__ = ["checked_exports", "render_exports", "Rendered"]


@dataclass(frozen=True)
class Rendered:
    """An export's text, written like the other result files
    (``render(result, graph) -> text``)."""

    text: str

    def render(self, result=None, graph=None) -> str:
        return self.text


def checked_exports(s, reads=None) -> list:
    """The ``--export`` values of the settings, parsed and their paths
    checked: writable, none given twice, none another file of the run, none
    a file it reads (``reads``: :class:`cli.files.Reads`), at most one to
    stdout."""
    if not s.export:
        return []
    from errors import InputError
    from exports.frameworks import parse_export

    if s.sweep or s.plans or s.plot:
        raise UsageError("--export writes the plan of one run; it cannot be used with a sweep, --plans or --plot")
    if getattr(s, "calibrate", None) is not None:
        raise UsageError("--export writes the plan of a run; --calibrate fits the cluster and plans nothing")
    try:
        exports = [parse_export(text) for text in s.export]
    except InputError as e:
        raise UsageError(str(e)) from None
    taken = {}
    if s.output is not None:
        taken[os.path.realpath(s.output)] = "--output"
    if s.dump_graph:
        taken[os.path.realpath(DOT_FILE)] = "--dump-graph"
    to_stdout = [e for e in exports if e.path is None]
    if len(to_stdout) > 1:
        raise UsageError(f"--export: {', '.join(e.framework.name for e in to_stdout)} would all go to stdout; "
                         "give all but one a path (FORMAT:PATH)")
    for e in exports:
        if e.path is None:
            continue
        check_writable(e.path, e.flag, reads)
        where = os.path.realpath(e.path)
        if where in taken:
            raise UsageError(f"{e.flag}: {e.path} is also where {taken[where]} writes")
        taken[where] = e.flag
    return exports


def render_exports(exports, planned) -> list[tuple]:
    """``(export, text)`` of each export of the :class:`planner.Planned`
    run; a format that cannot express the plan raises its one line."""
    if not exports:
        return []
    from exports.frameworks.plans import PlanView

    view = PlanView(planned.settings, planned.graph, planned.result)
    return [(e, e.framework.render(view)) for e in exports]
