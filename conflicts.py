"""Settings that contradict each other, refused before any work, each in
one line naming both sides.

**A plan given whole** (a plan file, ``evaluate``, or a standard
configuration, ``plan``) is costed as it is: the settings that choose how
the model is split (``pp``, ``microbatches``, ``schedule``, and the
execution options ``zero`` and ``recompute``) are refused with it,
whatever their value (a ``--plan`` string takes them as keys: ``pp=``,
``microbatch=``, ``schedule=``, ``zero=``, ``recompute=``; a plan file
records them per operator), and so is a number of devices other than the
one a plan file records (a ``--plan`` string is laid out on ``procs``
devices: there it is the device count).  Everything else (the cluster, the
model's sizes, the optimizer, the cost model's rules) applies to the plan
and overrides what a plan file records.

**Timing the search** (``profile``, ``measure``) times the search of one
plan per operator: it is refused where none runs (a plan given whole, the
search of standard configurations, a pipeline).
"""

from __future__ import annotations

from errors import InputError
from settings import OPTION_SETTINGS, flag_of

__all__ = ["check_given_plan", "check_timing", "PLAN_KEYS"]

#: what a plan given whole fixes, per setting: its words, and the --plan key that sets it
PLAN_KEYS = {"pp": ("pipeline stages", "pp=N"), "microbatches": ("micro-batches", "microbatch=SAMPLES"),
             "schedule": ("pipeline schedule", "schedule=NAME"), "zero": ("ZeRO stages", "zero=STAGE"),
             "recompute": ("recomputation", "recompute=HOW")}
assert set(OPTION_SETTINGS) <= set(PLAN_KEYS), "an execution option without its words"


def check_given_plan(s, recorded: dict | None = None) -> None:
    """Refuse the settings ``s`` gives against the plan it gives whole
    (``s.plan``, or ``s.evaluate`` whose file records ``recorded``)."""
    if s.plan is None and s.evaluate is None:
        return
    for name, (what, key) in PLAN_KEYS.items():
        value = getattr(s, name)
        if value is None:
            continue
        given = f"{flag_of(name)} {value}"
        if s.plan is not None:
            raise InputError(f"{given} and --plan {s.plan} cannot be given together: the plan string sets the "
                             f"{what} (write {key} in it)")
        raise InputError(f"{given} and --evaluate {s.evaluate} cannot be given together: a plan file is costed as it "
                         f"is, with its own {what} (plan with -g instead)")
    procs = (recorded or {}).get("procs")
    if recorded is not None and s.evaluate is not None and procs is None and "procs" not in s.explicit:  # devices
        raise InputError(f"--evaluate: {s.evaluate} records no procs (the devices the plan is for): give -p")
    if s.evaluate is not None and "procs" in s.explicit and procs is not None and procs != s.procs:
        raise InputError(f"-p {s.procs} and --evaluate {s.evaluate} cannot be given together: a plan file is costed "
                         f"on its own {procs} devices (to plan for {s.procs}, plan with -g instead)")


def check_timing(s) -> None:
    """Refuse ``profile`` and ``measure`` where no per-operator search runs."""
    if not (s.profile or s.measure):
        return
    where = ("--evaluate" if s.evaluate is not None else "--plan" if s.plan is not None else
             "--search standard" if s.search == "standard" else
             "--pp" if s.pp not in (None, 1) else "--microbatches" if s.microbatches is not None else None)
    if where is not None:
        raise InputError(f"--profile and --measure time the search of one plan per operator; they cannot be used "
                         f"with {where}")
