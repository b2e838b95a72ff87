"""nccl-tests' outputs as clusters print them, read into runs.

An output may come through a launcher that prefixes each line (``srun
--label``'s ``" 0: "``, Open MPI's ``[1,0]<stdout>:``, ``[0]`` of Intel MPI
and MPICH, ``[pod/name]``, ``host: ``, a time stamp): the prefix is taken off
and lines are grouped by it, so that processes which each printed a whole
output are told apart.  A file may hold several tests one after the other
(each starts with ``# Collective test starting`` or ``# nThread``); each is a
:class:`Run`: the test's name (from that line, a command line naming the
``*_perf`` binary, or the file's name), its ranks and hosts (its ``# Rank``
lines), and per size line the bytes, the out-of-place time and the
algorithm and bus bandwidths, read wherever the columns are (versions with
and without ``redop`` and ``root``, ``N/A`` in ``#wrong``, more columns after).
The JSON that nccl-tests writes with ``-J`` is read too.

:func:`collective` then says which collective a run measured from its table
itself: the reduction (``none`` for all-gather), the root, and the ratio of
bus to algorithm bandwidth (``2 (n - 1)/n`` for all-reduce, ``(n - 1)/n``
for all-gather and reduce-scatter, 1 for send/receive), the name only
deciding where the table cannot.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

__all__ = ["Run", "runs", "collective", "looks_like_output", "json_output", "FITTED", "TESTS"]

#: the tests whose collectives the model has, and the collective each measures
FITTED = ("all_reduce", "all_gather", "reduce_scatter", "sendrecv")
#: every test nccl-tests has
TESTS = FITTED + ("alltoall", "broadcast", "reduce", "gather", "scatter", "hypercube")

_PREFIXES = (
    re.compile(r"^\s*(\d+):\s?"),  # srun --label
    re.compile(r"^\[([^\]\s]{1,80})\](?:<std(?:out|err)>)?:?\s?"),  # [1,0]<stdout>:, [0], [pod/...]
    re.compile(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d[.,\d]*(?:Z|[+-]\d\d:?\d\d)?\s+()"),  # a time stamp
    re.compile(r"^([A-Za-z][\w.-]{0,80}):\s"),  # pdsh, clush: "host: "
)
_NAME = re.compile(r"\b(" + "|".join(TESTS) + r")_perf\b")
_START = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_THREAD = re.compile(r"^#?\s*nThread\s+\d+\s+nGpus\s+\d+")
_RANK = re.compile(r"^#\s*Rank\s+(\d+)(?:\s+Group\s+\d+)?(?:\s+Pid\s+(\d+))?\s+on\s+(\S+)")
_NUMBER = re.compile(r"^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
#: bytes of an element by nccl-tests' type names
TYPE_BYTES = {"int8": 1, "uint8": 1, "char": 1, "int32": 4, "uint32": 4, "int": 4, "int64": 8, "uint64": 8,
              "half": 2, "float16": 2, "float": 4, "float32": 4, "double": 8, "float64": 8, "bfloat16": 2,
              "f8e4m3": 1, "f8e5m2": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
_REDOPS = {"sum", "prod", "max", "min", "avg", "mulsum", "premulsum"}


@dataclass
class Row:
    size: float  # bytes, as nccl-tests counts them for its test
    count: float  # elements
    type: str
    redop: str | None  # None: the version prints no redop column
    root: int | None
    seconds: float  # out of place
    algbw: float  # GB/s
    busbw: float


@dataclass
class Run:
    """One test of an output: see the module docstring."""

    label: str | None = None  # the launcher's prefix of its lines
    name: str | None = None  # e.g. "all_reduce", from the output or the file's name
    named_by: str = ""  # where the name came from
    ranks: dict = field(default_factory=dict)  # rank -> set of (pid, host) that printed it
    rows: list = field(default_factory=list)
    header: list | None = None  # the column names of its table
    started: bool = False  # a "# nThread" line was read
    began: bool = False  # a "# Collective test starting" line was read
    first: int = 0  # the line of its first size line
    unread: list = field(default_factory=list)  # its size lines (or -J's results) whose figures do not read, from 1
    unread_in: str = "line"  # what ``unread`` numbers: "line" (of the file) or "result" (of -J's list)

    @property
    def hosts(self) -> set:
        return {h for seen in self.ranks.values() for _, h in seen}

    @property
    def repeated(self) -> bool:
        """Whether one rank number was printed by several processes: ranks
        that did not join one test."""
        return any(len(seen) > 1 for seen in self.ranks.values())


def _strip(line: str) -> tuple[str | None, str]:
    """A line without its launchers' prefixes, and the first prefix (the
    rank or host that printed it)."""
    label = None
    for _ in range(3):
        for p in _PREFIXES:
            m = p.match(line)
            if m and m.end() > 0:
                if label is None and m.group(1):
                    label = m.group(1)
                line = line[m.end():]
                break
        else:
            break
    return label, line.strip()  # indented too, as pasted into a page


def _number(tok: str) -> float | None:
    return float(tok) if _NUMBER.match(tok) else None


def _columns(header: list | None, toks: list) -> int | None:
    """Index of the out-of-place time in a size line's tokens: the header's
    first ``time`` when it agrees with the line, else the first place where
    a time, an algorithm bandwidth equal to bytes over time and a bus
    bandwidth follow one another."""
    size = float(toks[0])

    def fits(j):
        if j + 2 >= len(toks):
            return False
        t, alg, bus = (_number(x) for x in toks[j:j + 3])
        if t is None or alg is None or bus is None or t <= 0 or alg < 0 or bus < 0:
            return False
        want = size / t / 1e3  # GB/s
        return abs(alg - want) <= max(0.015, 0.03 * want)

    j = next((i for i, x in enumerate(header or ()) if x in ("time", "cputime")), None)
    if j is not None and fits(j):
        return j
    for j in range(3, min(7, len(toks) - 2)):
        if fits(j):
            return j
    return None


def _digits(tok: str) -> bool:
    """Whether ``tok`` is ASCII digits (``str.isdigit`` takes ``²``, which ``int`` refuses)."""
    return tok.isascii() and tok.isdigit()


def _sized(toks: list) -> bool:
    """Whether ``toks`` begin as a size line's: a size above 0 and a count, in digits."""
    return len(toks) >= 2 and _digits(toks[0]) and _digits(toks[1]) and int(toks[0]) > 0


def _row(toks: list, header: list | None) -> Row | None:
    if len(toks) < 6 or not _sized(toks):
        return None
    j = _columns(header, toks)
    if j is None:
        return None
    redop = root = None
    for tok in toks[3:j]:
        if _number(tok) is None:
            redop = tok.lower()
        elif _digits(tok.lstrip("-")):
            root = int(tok)
    t, alg, bus = (float(x) for x in toks[j:j + 3])
    return Row(float(toks[0]), float(toks[1]), toks[2].lower(), redop, root, t * 1e-6, alg, bus)


def looks_like_output(text: str) -> bool:
    """Whether ``text`` is an nccl-tests output (its ``# nThread`` line, its
    table's header, or size lines)."""
    rows = 0
    for line in text.splitlines()[:5000]:
        _, s = _strip(line)
        if _THREAD.match(s) or {"size", "busbw"} <= set(s.lstrip("#").split()):
            return True
        rows += _row(s.split(), None) is not None
        if rows >= 2:
            return True
    return False


def json_output(text: str) -> dict | None:
    """The output nccl-tests writes with ``-J FILE`` (JSON: its ``config``
    with the ``devices``, its ``results``), or None when ``text`` is not one."""
    if not text.lstrip().startswith("{"):
        return None
    import json

    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested too deeply to be nccl-tests' own
        return None
    return data if isinstance(data, dict) and isinstance(data.get("results"), list) else None


def _json_runs(data: dict) -> list[Run]:
    run = Run()
    for arg in data.get("args") or []:
        name = _NAME.search(arg) if isinstance(arg, str) else None
        if name:
            run.name, run.named_by = name.group(1), "its command line"
    config = data.get("config") if isinstance(data.get("config"), dict) else {}
    for d in config.get("devices") or []:
        if isinstance(d, dict) and isinstance(d.get("rank"), int):
            run.ranks.setdefault(d["rank"], set()).add((str(d.get("pid")), str(d.get("hostname"))))
    run.unread_in = "result"
    for i, r in enumerate(data["results"]):
        try:
            out = r.get("out_of_place") or r["in_place"]
            redop = str(r.get("redop", "")).strip().lower() or None
            row = Row(float(r["size"]), float(r["count"]), str(r["type"]).lower(), redop,
                      int(str(r.get("root", -1)).strip()), float(out.get("time", out.get("cpu_time"))) * 1e-6,
                      float(out["alg_bw"]), float(out["bus_bw"]))
        except (AttributeError, KeyError, TypeError, ValueError):
            run.unread.append(i + 1)
            continue
        if row.size > 0 and all(math.isfinite(x) for x in (row.seconds, row.algbw, row.busbw)) and row.seconds > 0:
            run.rows.append(row)
        elif row.size > 0 or not math.isfinite(row.size):  # a size of 0 (-b 0) times nothing: passed over
            run.unread.append(i + 1)
    return [run] if run.rows or run.unread else []


def runs(text: str, filename: str = "") -> list[Run]:
    """The tests in an output (see the module docstring), in the order they
    appear; those with no size line left out (a test whose size lines all
    fail to read is kept, with no rows and its ``unread`` lines)."""
    data = json_output(text)
    if data is not None:
        return _json_runs(data)
    groups: dict = {}  # label -> its runs (the last one open)
    names = []  # (line number, test, where read) of the lines naming a test
    for no, raw in enumerate(text.splitlines()):
        label, line = _strip(raw)
        out = groups.setdefault(label, [Run(label)])
        run = out[-1]
        m = _START.match(line)
        if m or _THREAD.match(line):
            if run.rows or run.started or (m and run.began):
                run = Run(label)
                out.append(run)
            if m:
                run.began = True
                name = _NAME.search(m.group(1))
                if name:
                    names.append((no, name.group(1), "its first line"))
            else:
                run.started = True
            continue
        if not line.startswith("#") and not line[:1].isdigit():
            name = _NAME.search(line)
            if name:  # a command line
                names.append((no, name.group(1), "a command line"))
                continue
        r = _RANK.match(line)
        if r:
            run.ranks.setdefault(int(r.group(1)), set()).add((r.group(2), r.group(3)))
            continue
        toks = line.lstrip("#").split()
        if line.startswith("#") or (toks[:1] == ["size"] and "busbw" in toks):
            if "size" in toks and "busbw" in toks:
                run.header = [t.lower() for t in toks]
            continue
        row = _row(toks, run.header)
        if row is not None:
            if not run.rows:
                run.first = no
            run.rows.append(row)
        elif _sized(toks) and len(toks) >= 3 and toks[2].lower() in TYPE_BYTES:  # its figures do not read
            if not run.rows and not run.unread:
                run.first = no
            run.unread.append(no + 1)
    found = sorted((run for out in groups.values() for run in out if run.rows or run.unread), key=lambda r: r.first)
    after = -1
    for run in found:  # the last name read since the previous test's first size line
        named = [(no, name, how) for no, name, how in names if after < no < run.first]
        if named:
            run.name, run.named_by = named[-1][1], named[-1][2]
        after = run.first
    named = _NAME.search(filename.rsplit("/", 1)[-1]) if filename else None
    for run in found:
        if run.name is None and named:
            run.name, run.named_by = named.group(1), "the file's name"
    return found


def _ratio(run: Run) -> float | None:
    """Bus over algorithm bandwidth, from the lines of the highest
    algorithm bandwidth (where two decimals are precise), None when no
    line reaches 1 GB/s."""
    good = [r for r in run.rows if r.algbw >= 1.0]
    if not good:
        return None
    top = max(r.algbw for r in good)
    xs = sorted(r.busbw / r.algbw for r in good if r.algbw >= 0.5 * top)
    return xs[len(xs) // 2]


def _per_rank(run: Run) -> float | None:
    """Bytes over elements times the element's bytes: 1 when the size is
    what each rank holds, the ranks when it is the whole gathered vector."""
    xs = sorted(r.size / (r.count * TYPE_BYTES[r.type]) for r in run.rows if r.type in TYPE_BYTES and r.count > 0)
    return xs[len(xs) // 2] if xs else None


def ranks_read_off(run: Run) -> int | None:
    """The ranks a table without ``# Rank`` lines implies: its sizes over
    one rank's elements (gathers and scatters), or its bus over algorithm
    bandwidth (``2 (n - 1)/n``, an all-reduce); None when neither says."""
    per = _per_rank(run)
    if per is not None and per >= 1.5 and abs(per - round(per)) < 0.01:
        return round(per)
    ratio = _ratio(run)
    if ratio is not None and 1.0 < ratio < 1.99:
        return round(2.0 / (2.0 - ratio))
    return None


def collective(run: Run, n: int) -> tuple[str, str]:
    """The test ``run`` is (one of :data:`TESTS`) over ``n`` ranks, read off
    its table (reduction, root, bus over algorithm bandwidth, bytes per
    element), and a note when the table and its name disagree or the table
    alone cannot tell (empty otherwise)."""
    redops = {r.redop for r in run.rows}
    redop = None if redops == {None} else ("none" if redops == {"none"} else "op")
    rooted = any(r.root is not None and r.root >= 0 for r in run.rows)
    ratio, per = _ratio(run), _per_rank(run)
    full, part = 2.0 * (n - 1) / n, (n - 1) / n

    def near(x, want):
        return x is not None and abs(x - want) <= 0.03 * max(want, 0.05)

    if rooted:
        cands = ["broadcast", "reduce", "gather", "scatter"]
        why = "a root"
    elif near(ratio, full) and n > 2:
        cands, why = ["all_reduce"], f"bus bandwidth {full:.3g} times the algorithm's"
    elif near(ratio, part) or (ratio is None and near(per, n) and n > 1):
        how = f"bus bandwidth {part:.3g} times the algorithm's" if ratio is not None else "sizes of all the ranks"
        if redop == "none":
            cands, why = ["all_gather", "alltoall"], f"no reduction, {how}"
        elif redop == "op":
            cands, why = ["reduce_scatter"], f"a reduction, {how}"
        else:
            cands, why = ["all_gather", "reduce_scatter", "alltoall"], how
    elif near(ratio, 1.0) or (ratio is None and near(per, 1.0)):
        how = "bus bandwidth equal to the algorithm's" if ratio is not None else "sizes of one rank"
        if redop == "none":
            cands = ["sendrecv", "broadcast", "hypercube"]
        else:
            cands = ["all_reduce", "sendrecv"] if n == 2 and redop == "op" else ["sendrecv"]
        why = ("a reduction, " if redop == "op" else "") + how
    else:
        cands, why = [], ""
    name = run.name
    if not cands:
        if name:
            return name, ""
        return "all_reduce", "(no test name in the output and its bandwidths fit no collective: taken as all_reduce)"
    if name in cands:
        return name, ""
    if name:
        return cands[0], (f"(named {name}_perf by {run.named_by}, but its table is {cands[0]}_perf's: {why}; "
                          f"fitted as {cands[0]})")
    if len(cands) > 1:
        return cands[0], (f"(no test name in the output; its table ({why}) is {cands[0]}_perf's or "
                          f"{' or '.join(c + '_perf' + chr(39) + 's' for c in cands[1:])}: taken as {cands[0]})")
    return cands[0], ""
