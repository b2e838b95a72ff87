"""``--draw FILE`` on the command line: the path checked before any work
(its format, that it can be written, that it is neither a file the run
reads nor another file it writes), the drawing written once the plan is
known (:mod:`drawing`)."""

from __future__ import annotations

import os

from cli.args import DOT_FILE, UsageError
from cli.files import check_writable, write_atomic

__all__ = ["checked_drawing", "write_drawing"]


def checked_drawing(s, exports=(), reads=None) -> str | None:
    """The format of the drawing the settings ask for (``None``: none),
    its path checked (see the module docstring; ``reads``: the run's
    inputs, :class:`cli.files.Reads`)."""
    if s.draw is None:
        return None
    if s.sweep or s.plans or s.plot:
        raise UsageError("--draw draws the plan of one run; it cannot be used with a sweep, --plans or --plot")
    if s.calibrate is not None:
        raise UsageError("--draw draws the plan of a run; --calibrate fits the cluster and plans nothing")
    from drawing import FORMATS, format_of

    fmt = format_of(s.draw)
    if fmt is None:
        raise UsageError(f"--draw: {s.draw!r} must end in {', '.join(list(FORMATS)[:-1])} or {list(FORMATS)[-1]}")
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError("--draw needs matplotlib: pip install -r requirements.txt")
    where = os.path.realpath(s.draw)
    written = {}
    if s.output is not None:
        written[os.path.realpath(s.output)] = "--output"
    if s.dump_graph:
        written[os.path.realpath(DOT_FILE)] = "--dump-graph"
    for e in exports:
        if e.path is not None:
            written[os.path.realpath(e.path)] = e.flag
    if where in written:
        raise UsageError(f"--draw: {s.draw} is also where {written[where]} writes")
    check_writable(s.draw, "--draw", reads)
    return fmt


def write_drawing(planned, path: str, fmt: str) -> str:
    """Draw the plan to ``path``; the line that says what was drawn."""
    from drawing import draw

    write_atomic(path, draw(planned, fmt))
    pipe = planned.result.pipeline
    what = (f"{pipe.pp} stage{'s' * (pipe.pp > 1)}, {pipe.schedule}, {pipe.m} micro-batch{'es' * (pipe.m > 1)}"
            if pipe is not None else "no stages")
    return f"Drew the plan ({what}) to {path}"
