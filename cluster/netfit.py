"""The network's constants fitted to nccl-tests' outputs through the model's
own collectives.

Each test measured (:mod:`cluster.nccl`) is priced as the model prices the
collective it is used for (:mod:`cluster`): an all-reduce over ``n`` ranks
on ``h`` hosts, ``q = n / h`` per host, takes

    2 S (q - 1)/q / (bw allreduce_eff) + 2 (S/q)(h - 1)/h / (inter_bw net_eff)
    + 2 (q - 1) latency + 2 (h - 1) inter_latency

(the ring on one host; ``allreduce_eff`` is ``link_eff`` unless given), an
all-gather or a reduce-scatter of ``S`` bytes in all half of that at
``link_eff``, and a send ``S / (bw link_eff) + latency`` (``inter_bw``,
``net_eff`` and ``inter_latency`` when the ring crosses hosts).  Each time
is linear in one over an efficiency and in a latency, so each is fitted by
least squares of the relative difference between the model's time and the
measured one:

* the efficiencies from the *large* messages: from the smallest whose
  algorithm bandwidth reaches 90 % of the test's highest up, those whose
  latency is under a tenth of their time;
* the latencies from the *latency-bound* messages, those whose moving of
  data is under a tenth of their time and that take at most a quarter
  longer than the quickest; without any the latency is kept as it was, and
  said so;

alternately until the two sets no longer change.  Tests on one host fit
``link_eff`` (all-gather, reduce-scatter and send; all-reduce too when it
is the only test) and ``latency``; an all-reduce faster than the link can
carry (in-switch reduction, NVLink SHARP) or measured beside other tests
fits ``allreduce_eff``, for the all-reduce alone.  Tests across hosts then
fit ``net_eff`` and ``inter_latency``, the part inside each host taken as
fitted (or as the cluster has it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from errors import InputError

__all__ = ["Table", "fit_network", "model_seconds", "LARGE_SHARE", "BOUND_SHARE"]

LARGE_SHARE = 0.9  # large messages: from the first reaching this share of the highest algorithm bandwidth
BOUND_SHARE = 0.1  # a message is latency-bound (bandwidth-bound) when moving data (its latency) takes under this
SLOWER = 1.25  # and a latency-bound message takes at most this times the quickest's time
WHAT = {"all_reduce": "all-reduce", "all_gather": "all-gather", "reduce_scatter": "reduce-scatter",
        "sendrecv": "send"}


@dataclass
class Table:
    """A test ready to fit: its collective, ranks and hosts, and the sizes
    (bytes) and out-of-place times (seconds) it measured."""

    test: str
    ranks: int
    hosts: int
    sizes: list
    seconds: list
    busbw: list
    algbw: list
    source: str  # the output's name, for the messages
    note: str = ""

    @property
    def title(self) -> str:
        where = "one node" if self.hosts == 1 else f"{self.hosts} nodes of {self.ranks // self.hosts}"
        return f"{self.test}_perf, {self.ranks} ranks on {where} ({self.source})"


def shown_bytes(x: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if x >= scale:
            return f"{x / scale:.4g} {unit}"
    return f"{x:.0f} B"


def shown_time(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.4g} us"
    if s < 1.0:
        return f"{s * 1e3:.4g} ms"
    return f"{s:.4g} s"


def _terms(t: Table, cluster) -> list[dict]:
    """Per message of ``t``: the model's time as seconds per unit of one
    over each efficiency (``ar``: the all-reduce inside a host, ``link``,
    ``net``) and steps at each latency (``latency``, ``inter_latency``)."""
    n, h = t.ranks, t.hosts
    q = n / h
    bw = cluster.bw * 1e9
    ibw = (cluster.inter_bw or cluster.bw) * 1e9
    out = []
    for s in t.sizes:
        if t.test == "all_reduce":
            d = {"ar": 2 * s * (q - 1) / q / bw, "net": 2 * (s / q) * (h - 1) / h / ibw,
                 "latency": 2 * (q - 1), "inter_latency": 2 * (h - 1)}
        elif t.test in ("all_gather", "reduce_scatter"):
            d = {"link": s * (q - 1) / q / bw, "net": (s / q) * (h - 1) / h / ibw,
                 "latency": q - 1, "inter_latency": h - 1}
        elif h > 1:  # a send across hosts: the slowest link sets the step
            d = {"net": s / ibw, "inter_latency": 1}
        else:
            d = {"link": s / bw, "latency": 1}
        out.append(d)
    return out


def _time(d: dict, v: dict) -> float:
    ar = v["allreduce_eff"] if v["allreduce_eff"] is not None else v["link_eff"]
    return (d.get("ar", 0.0) / ar + d.get("link", 0.0) / v["link_eff"] + d.get("net", 0.0) / v["net_eff"]
            + (d.get("latency", 0) * v["latency"] + d.get("inter_latency", 0) * v["inter_latency"]) * 1e-6)


def _moving(d: dict, v: dict) -> float:
    return _time(d, v) - (d.get("latency", 0) * v["latency"] + d.get("inter_latency", 0) * v["inter_latency"]) * 1e-6


def model_seconds(cluster, test: str, size: float, ranks: int, hosts: int) -> float:
    """The model's own time (seconds) of the collective ``test`` measures,
    of ``size`` bytes over ``ranks`` devices on ``hosts`` nodes, priced by
    the cluster's methods."""
    import numpy as np

    from kinds.base import Extents

    c = replace(cluster, gpus_per_node=ranks // hosts)
    C = Extents("b", [[float(ranks)]])
    words = size / c.word_bytes
    if test == "all_reduce":
        flop = c.allreduce(words, C, "b")
    elif test in ("all_gather", "reduce_scatter"):
        flop = c.allgather(words, C, "b")
    else:
        flop = c.send(words, C, "b")
    return float(np.ravel(c.seconds(flop))[0])


def _large(t: Table, terms: list, v: dict) -> list[int]:
    top = max(t.algbw) if t.algbw else 0.0
    if top <= 0:
        return []
    first = min(t.sizes[i] for i in range(len(t.sizes)) if t.algbw[i] >= LARGE_SHARE * top)
    return [i for i in range(len(t.sizes)) if t.sizes[i] >= first
            and _time(terms[i], v) - _moving(terms[i], v) <= BOUND_SHARE * t.seconds[i]]


def _small(t: Table, terms: list, v: dict) -> list[int]:
    """The latency-bound messages: moving their data takes under a tenth of
    their time in the model, and they take at most a quarter longer than
    the quickest (a time that grows with the size is not latency)."""
    least = min(t.seconds)
    return [i for i in range(len(t.sizes)) if _moving(terms[i], v) <= BOUND_SHARE * t.seconds[i]
            and t.seconds[i] <= SLOWER * least]


def _fit_inverse(points, key, v) -> float | None:
    """One over the efficiency ``key`` that fits ``points`` (pairs of a
    message's terms and its measured seconds) best, relative least squares;
    None when it cannot be positive."""
    num = den = 0.0
    for d, t in points:
        a = d.get(key, 0.0)
        if key == "link" and "ar" in d and v["allreduce_eff"] is None:
            a += d["ar"]  # the all-reduce at link_eff
        rest = _time(d, v) - a / v[_PARAM[key]]
        num += (a / t) * ((t - rest) / t)
        den += (a / t) ** 2
    return num / den if den > 0 and num > 0 else None


def _fit_latency(points, key, v) -> float:
    num = den = 0.0
    for d, t in points:
        k = d.get(key, 0) * 1e-6
        rest = _time(d, v) - k * v[key]
        num += (k / t) * ((t - rest) / t)
        den += (k / t) ** 2
    return num / den if den > 0 else v[key]


_PARAM = {"ar": "allreduce_eff", "link": "link_eff", "net": "net_eff"}
_HIGH = {"allreduce_eff": 2.0, "link_eff": 1.0, "net_eff": 1.0}


def _span(t: Table, idx: list[int]) -> str:
    """``idx``'s messages of ``t`` in words."""
    sizes = sorted(t.sizes[i] for i in idx)
    if len(sizes) == 1:
        return f"{t.test}_perf's {shown_bytes(sizes[0])}"
    return f"{t.test}_perf's {len(sizes)} from {shown_bytes(sizes[0])} to {shown_bytes(sizes[-1])}"


def _between(xs) -> str:
    return f"{min(xs):g}" if min(xs) == max(xs) else f"{min(xs):g} to {max(xs):g}"


def _level(tables, cluster, v: dict, groups: dict, lat_key: str, was: dict, lines: list, where: str):
    """Fit ``groups`` (efficiency -> (term, tables)) and ``lat_key`` on
    ``tables`` from the values ``v`` (changed in place); a line per fit."""
    terms = {id(t): _terms(t, cluster) for t in tables}
    capped = {}
    if "allreduce_eff" in groups and v["allreduce_eff"] is None:
        v["allreduce_eff"] = v["link_eff"]
    for _ in range(50):
        before = dict(v)
        for param, (key, ts) in groups.items():
            pts = [(terms[id(t)][i], t.seconds[i]) for t in ts for i in _large(t, terms[id(t)], v)]
            if not pts:
                continue
            x = _fit_inverse(pts, key, v)
            eff = _HIGH[param] if x is None else 1.0 / x
            capped[param] = eff > _HIGH[param]
            v[param] = min(eff, _HIGH[param])
        pts = [(terms[id(t)][i], t.seconds[i]) for t in tables for i in _small(t, terms[id(t)], v)]
        if pts:
            v[lat_key] = max(_fit_latency(pts, lat_key, v), 0.0)
        if all(abs(v[k] - before[k]) <= 1e-9 * max(abs(before[k]), 1e-12) for k in v if v[k] is not None):
            break
    for param, (key, ts) in groups.items():
        large = {id(t): _large(t, terms[id(t)], v) for t in ts}
        used = [t for t in ts if large[id(t)]]
        if not used:
            lines.append(f"{param} kept at {_was(was, param)}: no message large enough to be bandwidth-bound "
                         f"(in {', '.join(t.test + '_perf' for t in ts)}); measure up to a few GiB (-e 4G)")
            v[param] = was[param]
            continue
        bus = [t.busbw[i] for t in used for i in large[id(t)]]
        parts = "; ".join(_span(t, large[id(t)]) for t in used)
        what = ", ".join(sorted({("hierarchical " if t.hosts > 1 and t.test != "sendrecv" else "") + WHAT[t.test]
                                 for t in used}))
        line = (f"{param} {_was(was, param)} -> {v[param]:.3f}: the model's {what} time fitted to the large "
                f"messages ({parts}; bus bandwidth {_between(bus)} GB/s)")
        if capped.get(param):
            line += (f"; they run faster than the model can at {param} {_HIGH[param]:g}, kept at that: check "
                     f"{'--bw' if param != 'net_eff' else '--inter-bw'} (in-switch reduction, NVLS or SHARP, speeds "
                     "up all-reduces beyond the links)")
        lines.append(line)
    small = {id(t): _small(t, terms[id(t)], v) for t in tables}
    used = [t for t in tables if small[id(t)]]
    if used:
        steps = sorted({terms[id(t)][0].get(lat_key, 0) for t in used})
        parts = "; ".join(_span(t, small[id(t)]) for t in used)
        lines.append(f"{lat_key} {_was(was, lat_key)} -> {v[lat_key]:.3g} us: the latency-bound messages ({parts}), "
                     f"{' or '.join(f'{s:g}' for s in steps)} step{'s' * (steps != [1])} each")
    else:
        size, test = min((s, t.test) for t in tables for s in t.sizes)
        lines.append(f"{lat_key} kept at {v[lat_key]:g} us: no latency-bound message (the smallest, "
                     f"{shown_bytes(size)} in {test}_perf, spends most of its time moving data); "
                     "measure from small sizes (-b 8) to fit it")
    return terms


def _was(was: dict, key: str) -> str:
    return f"{was['link_eff']:g} (link_eff's)" if was[key] is None else f"{was[key]:g}"


def fit_network(tables: list[Table], cluster, where: str) -> tuple[dict, list[str], list[str]]:
    """The fitted fields, a line per fit (and per caveat), and the tables
    of measured against modelled times (see the module docstring)."""
    one = [t for t in tables if t.hosts == 1]
    many = [t for t in tables if t.hosts > 1]
    if many and cluster.inter_bw is None:
        raise InputError(f"--calibrate: {where}: {many[0].title} spans nodes; give the network between them "
                         "(--inter-bw or --network, with --gpus-per-node)")
    inter_was = cluster.latency if cluster.inter_latency is None else cluster.inter_latency
    v = {"link_eff": cluster.link_eff, "allreduce_eff": cluster.allreduce_eff, "net_eff": cluster.net_eff,
         "latency": cluster.latency, "inter_latency": inter_was}
    was = dict(v)
    lines = [f"{t.title}: {t.note}" for t in tables if t.note]
    fields = {}
    if one:
        ar = [t for t in one if t.test == "all_reduce"]
        other = [t for t in one if t.test != "all_reduce"]
        switch = [t for t in ar if max(t.busbw) > cluster.bw]
        groups = {}
        if other:
            groups["link_eff"] = ("link", other)
        if ar and (other or switch):
            groups["allreduce_eff"] = ("ar", ar)
        elif ar:
            v["allreduce_eff"] = None  # one all-reduce measured: every collective at its link_eff
            groups["link_eff"] = ("link", ar)
        if switch:
            lines.append(f"in-switch reduction: {switch[0].test}_perf's bus bandwidth reaches {max(switch[0].busbw):g}"
                         f" GB/s, above the link's {cluster.bw:g} GB/s (NVLink SHARP, NVLS): it sets allreduce_eff, "
                         "the all-reduce's alone" + ("" if other else
                                                     f"; link_eff kept at {v['link_eff']:g} for all-gather, "
                                                     "reduce-scatter and send, which in-switch reduction does not "
                                                     "speed up: to fit it, measure with NCCL_ALGO=Ring or "
                                                     "NCCL_NVLS_ENABLE=0 (or all_gather_perf)"))
        _level(one, cluster, v, groups, "latency", was, lines, where)
        fields.update(link_eff=v["link_eff"], latency=v["latency"], allreduce_eff=v["allreduce_eff"])
        if not many and cluster.inter_latency is None:
            v["inter_latency"] = v["latency"]
    if many:
        ar_in = v["allreduce_eff"] if v["allreduce_eff"] is not None else v["link_eff"]
        _level(many, cluster, v, {"net_eff": ("net", many)}, "inter_latency", was, lines, where)
        inside = ("as fitted above" if one else "as the cluster has them: no test on one node")
        if any(t.ranks > t.hosts and t.test != "sendrecv" for t in many):
            lines.append(f"between nodes, the part inside a node at link_eff {v['link_eff']:.3g}"
                         + (f", allreduce_eff {ar_in:.3g}" if ar_in != v["link_eff"] else "")
                         + f" and latency {v['latency']:.3g} us ({inside})")
        fields.update(net_eff=v["net_eff"], inter_latency=v["inter_latency"])
    fields = {k: x if x is None else float(f"{x:.4g}") for k, x in fields.items()}  # as the lines show them
    fitted = replace(cluster, **fields)
    details, off = [], 0
    for t in tables:
        terms = _terms(t, cluster)
        large, small = set(_large(t, terms, v)), set(_small(t, terms, v))
        details.append(f"{t.title}:")
        details.append(f"  {'size':>10}  {'measured':>10}  {'model':>10}  {'diff':>7}  fitted to")
        for i, s in enumerate(t.sizes):
            m = model_seconds(fitted, t.test, s, t.ranks, t.hosts)
            diff = m / t.seconds[i] - 1.0
            off += i in large and abs(diff) > 0.1
            use = "bandwidth" if i in large else ("latency" if i in small else "")
            details.append(f"  {shown_bytes(s):>10}  {shown_time(t.seconds[i]):>10}  {shown_time(m):>10}  "
                           f"{diff * 100:+6.1f}%  {use}".rstrip())
    if off:
        lines.append(f"the model is more than 10% off the measurement at {off} large message{'s' * (off > 1)} "
                     "(see the table): the bandwidth measured varies with the size more than one efficiency can say")
    return fields, lines, details
