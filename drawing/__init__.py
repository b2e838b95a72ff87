"""Plans drawn: one picture of a planned run (``--draw FILE``).

A drawing shows, for the plan of one run, what the report gives as
numbers: the pipeline's schedule as a timeline per stage (forward and
backward passes of each micro-batch in the order the schedule runs them,
the sends, the bubble, the gradients' reduction and its overlap, to scale
with the predicted times; a plan without stages is one lane), the memory
per device as stacked bars against the capacity, the step time's parts
beside the baselines of ``--compare``, and the layers' splits (repeated
blocks drawn once, with their count).

Its data is computed first, as plain records (:mod:`drawing.records`), by
:func:`figure` from the result the run already has (nothing is costed
again); :mod:`drawing.render` then draws them with matplotlib, which only
this path imports::

    >>> from planner import plan
    >>> from settings import Settings
    >>> fig = figure(plan(Settings(graph="alexnet", procs=4)))
    >>> len(fig.timelines[0].lanes), len(fig.splits[0].rows)
    (1, 14)
"""

from __future__ import annotations

import os

from drawing.figure import figure

__all__ = ["figure", "draw", "FORMATS", "format_of"]

#: the file formats a drawing is written in, by the file's suffix
FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}


def format_of(path: str) -> str | None:
    """The format of a drawing written to ``path`` (``None``: none)."""
    return FORMATS.get(os.path.splitext(path)[1].lower())


def draw(planned, fmt: str) -> bytes:
    """The drawing of a :class:`planner.Planned` run, as ``fmt``."""
    from drawing.render import render

    return render(figure(planned), fmt)
