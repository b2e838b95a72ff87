"""The records a drawing is made of: plain data, computed from a result
(:mod:`drawing.schedule`, :mod:`drawing.figure`) before anything is drawn,
so that what a picture shows can be read and checked without looking at
it.  Times are in seconds, memory in bytes."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Box", "Lane", "Timeline", "Part", "Bar", "Row", "Group", "Splits", "Figure"]


@dataclass(frozen=True)
class Box:
    """One span of a lane: ``kind`` is ``forward``, ``backward`` (of
    micro-batch ``micro``, model chunk ``chunk``), ``communication`` (a
    plan without stages: its exposed communication), ``reduction`` (the
    gradients' reduction once the pipeline is done) or ``reduction
    overlapped`` (its share hidden behind the last backward pass).
    ``send``: the seconds at its end spent sending to the next stage."""

    kind: str
    start: float
    end: float
    micro: int | None = None
    chunk: int = 0
    send: float = 0.0

    @property
    def length(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class Lane:
    """The devices of one stage (or of the whole plan) and what they do."""

    label: str
    devices: tuple[int, int]  # first and last device
    boxes: tuple[Box, ...]

    @property
    def busy(self) -> float:
        """Seconds of forward and backward passes (and, without stages, of
        exposed communication): what the lane is not idle for."""
        return math.fsum(b.length for b in self.boxes if not b.kind.startswith("reduction"))

    @property
    def end(self) -> float:
        return max((b.end for b in self.boxes), default=0.0)


@dataclass(frozen=True)
class Timeline:
    """A plan's step as lanes of boxes: ``run`` is when the last backward
    pass ends, ``step`` the predicted step time (the reductions' exposed
    part after ``run``); ``interval`` the least time between two
    micro-batches entering the first stage, ``schedule`` its name
    (``""`` without stages), ``bubble`` the reported idle share of the
    slowest stage; ``note`` what the picture cannot show as priced."""

    name: str
    schedule: str
    micro_batches: int
    lanes: tuple[Lane, ...]
    run: float
    step: float
    interval: float = 0.0
    bubble: float = 0.0
    slowest: int = 0
    note: str = ""

    @property
    def length(self) -> float:
        """Where the drawn step ends: the last box's end."""
        return max(lane.end for lane in self.lanes)

    def idle(self, lane: int) -> float:
        """Seconds lane ``lane`` waits before the last backward pass ends:
        the bubble as that stage sees it."""
        return self.run - self.lanes[lane].busy


@dataclass(frozen=True)
class Part:
    name: str
    value: float


@dataclass(frozen=True)
class Bar:
    """A stacked bar: ``parts`` (name and value, in stacking order);
    ``group`` the plan it belongs to, ``label`` under it."""

    label: str
    group: str
    parts: tuple[Part, ...]

    @property
    def total(self) -> float:
        return math.fsum(p.value for p in self.parts)

    def part(self, name: str) -> float:
        return math.fsum(p.value for p in self.parts if p.name == name)


@dataclass(frozen=True)
class Row:
    """One row of the splits: the operator ``ids`` it stands for (one per
    repeated block: ``count`` of them; or, a ``span``, operators one after
    the other alike in splits and options), its ``label`` and kind, its
    split on each letter of its iteration space, its options, and the
    pipeline stages its operators run on."""

    label: str
    kind: str
    ids: tuple[int, ...]
    splits: tuple[tuple[str, int], ...]  # (letter, ways), the operator's letters in order
    options: tuple[tuple[str, object], ...]
    stages: tuple[int, ...] = (0,)
    span: bool = False

    @property
    def count(self) -> int:
        return len(self.ids)

    @property
    def devices(self) -> int:
        return math.prod(w for _, w in self.splits)


@dataclass(frozen=True)
class Group:
    """Rows ``first`` to ``last`` (inclusive) that stand for ``blocks``
    blocks alike, drawn once, under ``title``."""

    title: str
    first: int
    last: int
    blocks: int = 1


@dataclass(frozen=True)
class Splits:
    """The layers' splits: rows, the runs of blocks drawn once, the
    letters split somewhere in the plan (the columns), the options set
    somewhere, and whether the plan has stages."""

    rows: tuple[Row, ...]
    blocks: tuple[Group, ...]
    letters: tuple[str, ...]
    options: tuple[str, ...]
    staged: bool = False
    plan: str = ""  # whose splits, when a drawing shows two plans'
    hidden: int = 0  # operators left out (past the most lines a drawing shows)


@dataclass(frozen=True)
class Figure:
    """Everything a drawing shows: the title, the timelines (the plan's,
    and the per-operator optimum's beside a standard configuration), the
    memory bars against ``capacity`` (bytes a plan may use) and
    ``device_memory``, the step time bars (the plan's, then the
    baselines'), and the splits of each plan a timeline shows."""

    title: str
    subtitle: str
    timelines: tuple[Timeline, ...]
    memory: tuple[Bar, ...]
    capacity: float | None
    device_memory: float | None
    times: tuple[Bar, ...]
    splits: tuple[Splits, ...]
