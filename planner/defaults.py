"""What a run searches when no flag says, and what to say when nothing fits.

On a *real device* (a device preset other than the paper's, a cluster file
giving a capacity) a plan that merely fits the memory needs the options
frameworks use: activation recomputation (``--recompute``), ZeRO
(``--zero``) and pipeline stages (``--pp``).  There, each of them a flag
does not fix is searched (``auto``); stages searched so (not asked for
with ``--pp auto``) are searched for models with repeated blocks only (a
transformer's layers; a graph without any keeps its operators together),
and compete with no stages at all, the whole batch at once.  The paper's neutral setting
(the paper's device, no capacity from a preset or a file) keeps every
default as it was: nothing is searched that the flags do not ask for.
Costing a given plan (``--plan``, ``--evaluate``) and ``--search standard``
(whose grid holds these options) change nothing; ``--profile`` and
``--measure``, which time one per-operator search, leave stages out.

When nothing fits, the message says what would: more devices (the need
over the capacity, rounded up to whole nodes), the options and the stages
where they were not searched, and for a given pipeline a larger split of
the batch (more micro-batches).
"""

from __future__ import annotations

import math
from dataclasses import replace

from errors import plain
from settings import Settings

__all__ = ["real_device", "with_defaults", "what_would_fit", "SEARCHED_ON_A_DEVICE"]

SEARCHED_ON_A_DEVICE = ("recompute", "zero", "pp")


def real_device(s: Settings, cluster) -> bool:
    """Whether the settings plan for a real device: a preset other than the
    paper's, or a cluster file, with a capacity."""
    return cluster.capacity is not None and (cluster.device not in ("", "paper") or s.cluster is not None)


def with_defaults(s: Settings, cluster) -> Settings:
    """``s`` with what a real device searches by default (see the module
    docstring): ``auto`` for each of recomputation, ZeRO and pipeline
    stages that no flag fixes."""
    if not real_device(s, cluster) or s.plan is not None or s.evaluate is not None or s.search is not None:
        return s
    searched = SEARCHED_ON_A_DEVICE
    if s.profile or s.measure or isinstance(s.microbatches, int):  # they time one search per operator; and
        searched = tuple(k for k in searched if k != "pp")  # --microbatches M without --pp accumulates them
    return replace(s, **{k: "auto" for k in searched if getattr(s, k) is None})


def what_would_fit(s: Settings, cluster, need: float, *, standard: bool = False) -> str:
    """The end of a message saying that nothing needing less than ``need``
    bytes per device was found: what would change it."""
    capacity = cluster.capacity
    if capacity is None or not math.isfinite(need) or need <= 0:
        return ""
    node = cluster.gpus_per_node or 8
    more = max(s.procs + 1, math.ceil(s.procs * need / capacity))
    if more > node:
        more = -(-more // node) * node
    ways = [f"more devices (about {more:,}, if the plan's memory shrinks with them)"]
    if not standard:
        fixed = [f"--{k} auto" for k in ("recompute", "zero") if getattr(s, k) != "auto"]
        if s.pp != "auto":
            fixed.append("--pp auto")
        if fixed:
            ways.append(f"{', '.join(fixed)} (not searched here)")
        if isinstance(s.pp, int) and s.pp > 1 and s.microbatches not in (None, "auto"):
            ways.append("more micro-batches (--microbatches auto: a larger split of the batch)")
        elif s.pp in (None, 1) and s.microbatches is None:
            ways.append("--microbatches auto (gradient accumulation: a larger split of the batch)")
    what = "; it would fit with " + (" or ".join(ways) if len(ways) < 3 else ", ".join(ways[:-1]) + " or " + ways[-1])
    if cluster.headroom_account:  # the capacity is not the memory the user gave or the data sheet states: say why
        what += f"; {plain(capacity / 1e9, 4)} GB is the device's {cluster.headroom_account} (--headroom)"
    return what
