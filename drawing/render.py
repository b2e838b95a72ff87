"""A :class:`drawing.records.Figure` drawn with matplotlib (imported here
only, without pyplot: no global state), to PNG, SVG or PDF bytes.

The panels are laid out in inches, each as tall as what it holds (a lane
per stage, a row per operator or block drawn once), so that no label
overlaps another whatever the model's depth.  One colour means one thing
in every panel: the compute blues, the communication orange, the idle grey
of the bubble, the reduction purple; the memory parts their own colours,
which the splits' option cells reuse (ZeRO shards the optimizer state,
recomputation saves activations).
"""

from __future__ import annotations

import io
import math

from drawing.figure import MEMORY_PARTS, TIME_PARTS
from drawing.records import Figure
from report import fmt_bytes as _fmt_bytes
from report import fmt_time as _fmt_time

__all__ = ["render", "page", "COLOURS"]

COLOURS = {
    "forward": "#8FB3E3", "backward": "#2F5D9E", "compute": "#4A78B8",
    "exposed communication": "#E8912D", "communication": "#E8912D", "send": "#E8912D",
    "bubble": "#D4D4D4", "waiting on the host": "#8C564B", "gradient reduction": "#8E5EA2", "reduction": "#8E5EA2",
    "reduction overlapped": "#CDB5DA",
    "weights": "#2CA02C", "gradients": "#98DF8A", "optimizer state": "#BCBD22", "activations": "#D62728",
    "transients": "#FF9896",
}
_EXTRA_COLOURS = ("#8C564B", "#C49C94", "#17BECF", "#9EDAE5", "#7F7F7F")
_OPTION_COLOURS = {"zero": "#E4E4A6", "recompute": "#F2B3B3"}
_DEGREE = ("#FFFFFF", "#46627F")  # splits: one way to the most ways

WIDTH = 13.0  # inches
LEFT, RIGHT = 1.05, 0.35
LANE = 0.42  # inches per timeline lane
ROW = 0.19  # inches per splits row
NOTE = 0.25  # inches for a timeline's note
DPI = 100


def _mix(colour: str, towards: str, share: float) -> str:
    a = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    b = [int(towards[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(x + (y - x) * share):02X}" for x, y in zip(a, b))


def _unit(seconds: float) -> tuple[str, float]:
    return ("s", 1.0) if seconds >= 2.0 else ("ms", 1e3) if seconds >= 2e-3 else ("us", 1e6)


def _memory_colour(name: str, extras: list[str]) -> str:
    if name in COLOURS:
        return COLOURS[name]
    return _EXTRA_COLOURS[extras.index(name) % len(_EXTRA_COLOURS)]


# -- the panels --------------------------------------------------------------------------


def _timeline(ax, tl, scale: float, unit: str, span: float) -> list:
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Patch, Rectangle

    n = len(tl.lanes)
    per_second = (WIDTH - LEFT - RIGHT) / span  # inches per second on this axis
    rects, colours = [], []
    for y, lane in enumerate(tl.lanes):
        ax.add_patch(Rectangle((0, y - 0.36), tl.run * scale, 0.66, facecolor=COLOURS["bubble"], edgecolor="none",
                               zorder=0))
        for b in lane.boxes:
            x, w = b.start * scale, b.length * scale
            if b.kind == "reduction overlapped":
                rects.append((x, y + 0.32, w, 0.12))
                colours.append(COLOURS[b.kind])
                continue
            colour = COLOURS[b.kind]
            if b.chunk:  # later chunks of an interleaved schedule: lighter
                colour = _mix(colour, "#FFFFFF", 0.35 * b.chunk / max(1, b.chunk + 1))
            rects.append((x, y - 0.36, w, 0.66))
            colours.append(colour)
            if b.send > 0:
                rects.append(((b.end - b.send) * scale, y + 0.18, b.send * scale, 0.12))
                colours.append(COLOURS["send"])
            if b.micro is not None and b.length * per_second >= 0.17:
                ax.text(x + w / 2, y - 0.03, str(b.micro + 1), ha="center", va="center", fontsize=6.5,
                        color="white" if b.kind == "backward" else "black", zorder=4)
    patches = [Rectangle((x, y), w, h) for x, y, w, h in rects]
    edges = [0.4 if w / scale * per_second >= 0.08 else 0.0 for _, _, w, _ in rects]  # white gaps between wide boxes
    ax.add_collection(PatchCollection(patches, facecolors=colours, edgecolors="white", linewidths=edges, zorder=2))
    ax.axvline(tl.step * scale, color="black", linestyle="--", linewidth=0.9, zorder=5)
    ax.text(tl.step * scale, -0.62, f" step {_fmt_time(tl.step)}", fontsize=8, va="bottom", ha="right")
    if tl.schedule and tl.run < tl.step:
        ax.axvline(tl.run * scale, color="#555555", linestyle=":", linewidth=0.8, zorder=5)
    ax.set_ylim(n - 0.45, -0.7)
    ax.set_xlim(0, span * scale)
    ax.set_yticks(range(n), [f"{lane.label}\ndevices {lane.devices[0]}-{lane.devices[1]}" if
                             lane.devices[0] != lane.devices[1] else f"{lane.label}\ndevice {lane.devices[0]}"
                             for lane in tl.lanes], fontsize=8)
    ax.tick_params(axis="y", length=0)
    ax.set_xlabel(f"time ({unit})", fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    what = (f"{tl.schedule}, {tl.micro_batches} micro-batch{'es' * (tl.micro_batches > 1)}; bubble "
            f"{100 * tl.bubble:.1f}% of the slowest stage's (stage {tl.slowest}) busy time" if tl.schedule
            else "one step, no stages")
    ax.set_title(f"Schedule of the {tl.name}: {what}", fontsize=9.5, loc="left")
    handles = [Patch(facecolor=COLOURS["forward"], label="forward"),
               Patch(facecolor=COLOURS["backward"], label="backward")]
    if tl.schedule:
        handles.append(Patch(facecolor=COLOURS["bubble"], label="idle (bubble)"))
    kinds = {b.kind for lane in tl.lanes for b in lane.boxes}
    if any(b.send for lane in tl.lanes for b in lane.boxes):
        handles.append(Patch(facecolor=COLOURS["send"], label="sends to the next stage"))
    if "communication" in kinds:
        handles.append(Patch(facecolor=COLOURS["communication"], label="exposed communication"))
    if "waiting on the host" in kinds:
        handles.append(Patch(facecolor=COLOURS["waiting on the host"], label="waiting on the host's launches"))
    if "reduction" in kinds:
        handles.append(Patch(facecolor=COLOURS["reduction"], label="gradient reduction"))
    if "reduction overlapped" in kinds:
        handles.append(Patch(facecolor=COLOURS["reduction overlapped"], label="gradient reduction, overlapped"))
    if any(b.chunk for lane in tl.lanes for b in lane.boxes):
        handles.append(Patch(facecolor=_mix(COLOURS["forward"], "#FFFFFF", 0.35 / 2),
                             label="lighter: later chunks"))
    return handles


def _times(ax, bars, height: float) -> None:
    n = len(bars)
    total = max(b.total for b in bars)
    unit, scale = _unit(total)
    seen = []
    for y, b in enumerate(bars):
        left = 0.0
        for p in b.parts:
            if p.value <= 0:
                continue
            ax.barh(y, p.value * scale, left=left, height=0.62, color=COLOURS[p.name],
                    label=p.name if p.name not in seen else None)
            seen.append(p.name)
            left += p.value * scale
        ax.text(left + total * scale * 0.01, y, _fmt_time(b.total), va="center", fontsize=7.5)
    ax.set_yticks(range(n), [b.label for b in bars], fontsize=8)
    ax.set_ylim(max(n, 2) - 0.5, -0.5)
    ax.set_xlim(0, total * scale * 1.16)
    ax.set_xlabel(f"predicted step time ({unit})", fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    ax.set_title("Step time by part" + (", beside the baselines" if n > 1 else ""), fontsize=9.5, loc="left")
    order = [name for name in TIME_PARTS if name in seen]
    handles = {h.get_label(): h for h in ax.containers}
    ax.legend([handles[name] for name in order], order, fontsize=7.5, loc="upper left", frameon=False,
              bbox_to_anchor=(0, -0.5 / height), ncol=min(len(order), 4), borderaxespad=0, handlelength=1.2,
              columnspacing=1.0)  # at most four a row: five overrun the memory plot beside
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _memory(ax, fig: Figure) -> None:
    bars = fig.memory
    extras = [p.name for b in bars for p in b.parts if p.name not in MEMORY_PARTS]
    extras = list(dict.fromkeys(extras))
    xs, x, group = [], 0.0, None
    for b in bars:
        if group is not None and b.group != group:
            x += 0.6
        xs.append(x)
        x += 1.0
        group = b.group
    top = max([b.total for b in bars] + [fig.device_memory or 0.0, fig.capacity or 0.0])
    seen = []
    for xi, b in zip(xs, bars):
        bottom = 0.0
        for p in b.parts:
            if p.value <= 0:
                continue
            ax.bar(xi, p.value / 1e9, bottom=bottom, width=0.72, color=_memory_colour(p.name, extras),
                   label=p.name if p.name not in seen else None)
            seen.append(p.name)
            bottom += p.value / 1e9
        over = fig.capacity is not None and b.total > fig.capacity * (1 + 1e-12)
        ax.text(xi, bottom + top / 1e9 * 0.01, _fmt_bytes(b.total) + ("!" if over else ""), ha="center",
                va="bottom", fontsize=6.5 if len(bars) > 8 else 7.5, rotation=90 if len(bars) > 8 else 0,
                color="#B00000" if over else "black")
    right = xs[-1] + 0.6
    beside = ax.get_yaxis_transform()  # x in the axes' width, y in GB: the lines' labels right of the axes
    if fig.device_memory is not None:
        ax.axhline(fig.device_memory / 1e9, color="#555555", linestyle=":", linewidth=0.9)
        ax.text(1.01, fig.device_memory / 1e9, f"device {_fmt_bytes(fig.device_memory)}", fontsize=7,
                va="bottom", ha="left", color="#555555", transform=beside, clip_on=False)
    if fig.capacity is not None:
        ax.axhline(fig.capacity / 1e9, color="black", linestyle="--", linewidth=0.9)
        headroom = fig.device_memory is not None and fig.device_memory > fig.capacity
        if headroom:
            ax.axhspan(fig.capacity / 1e9, fig.device_memory / 1e9, facecolor="none", edgecolor="#AAAAAA",
                       hatch="///", linewidth=0)
        ax.text(1.01, fig.capacity / 1e9, f"capacity {_fmt_bytes(fig.capacity)}"
                + ("\n(less the headroom)" if headroom else ""), fontsize=7, va="top", ha="left", transform=beside,
                clip_on=False)
    labels = [b.label for b in bars]
    rotate = len(bars) > 6
    ax.set_xticks(xs, labels, fontsize=7.5, rotation=40 if rotate else 0, ha="right" if rotate else "center")
    pad = max(0.0, 4.0 - (right - xs[0] + 0.6)) / 2  # a bar no wider with one bar than with four
    ax.set_xlim(xs[0] - 0.6 - pad, right + pad)
    ax.set_ylim(0, top / 1e9 * (1.22 if len(bars) > 8 else 1.12))
    ax.set_ylabel("GB per device", fontsize=8)
    ax.tick_params(axis="y", labelsize=8)
    groups = list(dict.fromkeys(b.group for b in bars))
    ax.set_title("Memory per device" + (" by stage" if any(b.label.startswith("stage") for b in bars) else "")
                 + (f" ({', '.join(groups)})" if len(groups) > 1 else ""), fontsize=9.5, loc="left")
    order = [name for name in list(MEMORY_PARTS) + extras if name in seen]
    handles = {h.get_label(): h for h in ax.containers}
    ax.legend([handles[name] for name in order][::-1], order[::-1], fontsize=7, loc="lower left",
              bbox_to_anchor=(1.0, 0.0), frameon=False)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _splits_height(sp) -> float:
    return ROW * (len(sp.rows) + len(sp.blocks) + 1 + bool(sp.hidden)) + 0.95


def _stages(stages) -> str:
    """``0``, ``1-3`` or ``0, 2``: the stages a row's operators run on."""
    if len(stages) > 1 and stages[-1] - stages[0] == len(stages) - 1:
        return f"{stages[0]}-{stages[-1]}"
    return ", ".join(map(str, stages))


def _splits(ax, sp, width: float) -> None:
    from matplotlib.patches import Rectangle

    cols = [("operator", 3.3), ("kind", 1.45)] + ([("stage", 0.6)] if sp.staged else [])
    cols += [("blocks", 0.55), ("devices", 0.6)]
    first_letter = len(cols)
    cols += [(c, 0.42) for c in sp.letters]
    cols += [(o, 1.1) for o in sp.options]
    x, lefts = 0.0, []
    for _, w in cols:
        lefts.append(x)
        x += w
    ax.set_xlim(0, width)
    ax.set_ylim(len(sp.rows) + len(sp.blocks) + 1 + bool(sp.hidden), 0)
    ax.axis("off")
    most = max([w for row in sp.rows for _, w in row.splits] + [2])
    for (name, w), left in zip(cols, lefts):
        ax.text(left + (0.05 if w > 0.5 else w / 2), 0.55, name, fontsize=8, fontweight="bold", va="center",
                ha="left" if w > 0.5 else "center")
    heads = {g.first: g.title for g in sp.blocks}
    ends = {g.last for g in sp.blocks}
    y = 1
    for i, row in enumerate(sp.rows):
        if i in heads:
            ax.add_patch(Rectangle((0, y + 0.05), x, 0.9, facecolor="#E6E6E6", edgecolor="none"))
            ax.text(0.05, y + 0.5, heads[i], fontsize=7.5, fontweight="bold", va="center")
            y += 1
        label = row.label if len(row.label) <= 44 else row.label[:43] + "~"
        cells = [label, row.kind] + ([_stages(row.stages)] if sp.staged else [])
        cells += [f"{row.count} ops" if row.span else f"x{row.count}" if row.count > 1 else "", str(row.devices)]
        for left, text in zip(lefts, cells):
            ax.text(left + 0.05, y + 0.5, text, fontsize=7.5, va="center")
        ways = dict(row.splits)
        for k, letter in enumerate(sp.letters):
            left = lefts[first_letter + k]
            if letter not in ways:
                continue
            n = ways[letter]
            share = math.log2(n) / math.log2(most)
            shade = _mix(_DEGREE[0], _DEGREE[1], 0.25 + 0.75 * share) if n > 1 else "#F4F4F4"
            ax.add_patch(Rectangle((left + 0.03, y + 0.08), 0.36, 0.84, facecolor=shade, edgecolor="none"))
            ax.text(left + 0.21, y + 0.5, str(n), fontsize=7.5, ha="center", va="center",
                    color=("white" if share > 0.4 else "black") if n > 1 else "#A0A0A0")
        opts = dict(row.options)
        for k, name in enumerate(sp.options):
            if name in opts:
                left = lefts[first_letter + len(sp.letters) + k]
                ax.add_patch(Rectangle((left + 0.03, y + 0.08), 1.04, 0.84,
                                       facecolor=_OPTION_COLOURS.get(name, "#EEEEEE"), edgecolor="none"))
                ax.text(left + 0.08, y + 0.5, f"{name}={opts[name]}", fontsize=7.5, va="center")
        if i in ends:  # the end of a run of blocks drawn once
            ax.plot([0, x], [y + 1, y + 1], color="#BBBBBB", linewidth=0.6)
        y += 1
    if sp.hidden:
        ax.text(0.05, y + 0.5, f"... and {sp.hidden} more operators, not drawn: the report lists every one",
                fontsize=7.5, va="center", style="italic")
    split = ", ".join(sp.letters) or "none"
    whose = f" of the {sp.plan}" if sp.plan else ""
    ax.set_title(f"Splits of the layers{whose}: the ways each dimension is split, letters as the report's dims (split "
                 f"here: {split}); blocks alike drawn once, with their count", fontsize=9.5, loc="left")


# -- the page ----------------------------------------------------------------------------


def page(fig: Figure):
    """The matplotlib figure (no pyplot) of ``fig``."""
    from matplotlib.figure import Figure as Page

    span = max(max(tl.length, tl.step) for tl in fig.timelines)
    unit, scale = _unit(span)
    head = 0.95
    heights = [LANE * len(tl.lanes) + 0.45 for tl in fig.timelines]
    below = 0.95  # an axis' tick labels, its label and a legend under it
    middle = max(3.0, 0.34 * len(fig.times) + 1.3)
    tables = [_splits_height(sp) for sp in fig.splits]
    total = (head + sum(h + below + 0.35 + NOTE * bool(tl.note) for h, tl in zip(heights, fig.timelines)) + middle
             + 1.2 + sum(tables) + 0.3)
    out = Page(figsize=(WIDTH, total), dpi=DPI)
    # a long title (a plan's whole standard configuration) in smaller type, to stay on the page
    out.text(LEFT / WIDTH, 1 - 0.3 / total, fig.title, fontsize=min(13.0, 1300.0 / max(len(fig.title), 1)),
             fontweight="bold", va="top")
    out.text(LEFT / WIDTH, 1 - 0.62 / total, fig.subtitle, fontsize=min(9.5, 1330.0 / max(len(fig.subtitle), 1)),
             va="top", color="#333333")

    def axes(top: float, height: float, left: float = LEFT, right: float = WIDTH - RIGHT):
        return out.add_axes((left / WIDTH, 1 - (top + height) / total, (right - left) / WIDTH, height / total))

    y = head + 0.3
    for tl, h in zip(fig.timelines, heights):
        handles = _timeline(axes(y, h), tl, scale, unit, span)
        out.legend(handles=handles, loc="upper left", ncol=len(handles), fontsize=7.5, frameon=False,
                   bbox_to_anchor=(LEFT / WIDTH, 1 - (y + h + 0.5) / total))
        if tl.note:  # what the lanes cannot show as priced, under the legend
            out.text(LEFT / WIDTH, 1 - (y + h + 0.82) / total, tl.note, fontsize=8, color="#B00000", va="top")
        y += h + below + 0.35 + NOTE * bool(tl.note)
    mid = WIDTH * 0.47
    tall = min(middle, 0.42 * max(len(fig.times), 2) + 0.5)  # a bar as thick however many there are
    _times(axes(y, tall, LEFT, mid - 0.2), fig.times, tall)
    _memory(axes(y, middle, mid + 0.55, WIDTH - 1.75), fig)
    y += middle + 1.2
    for sp, h in zip(fig.splits, tables):
        _splits(axes(y, h - 0.3, 0.3, WIDTH - 0.3), sp, WIDTH - 0.6)
        y += h
    return out


def render(fig: Figure, fmt: str) -> bytes:
    """The drawing of ``fig`` as ``fmt`` (``png``, ``svg`` or ``pdf``)."""
    import matplotlib

    with matplotlib.rc_context({"svg.hashsalt": "pase", "font.size": 8}):
        drawn = page(fig)
        buf = io.BytesIO()
        metadata = {"png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}[fmt]
        drawn.savefig(buf, format=fmt, dpi=DPI, metadata=metadata)
    return buf.getvalue()
