"""``--calibrate FILE``: fit the realistic model's constants to measured
figures (:mod:`cluster.calibrate`), print the fitted cluster, and with
``--save-cluster PATH`` write it as a cluster file."""

from __future__ import annotations

import os
from dataclasses import replace

from cli.files import check_writable, write_atomic
from errors import InputError
from cli.args import UsageError

__all__ = ["run_calibration"]


def _step_record(data: dict, where: str) -> dict | None:
    """What the plan file of the measurements' ``step`` records (its
    framework runs the step the fit predicts, on its devices), or None (no
    step, or a plan file refused where the step is predicted)."""
    step = data.get("step")
    if not isinstance(step, dict) or not isinstance(step.get("plan"), str):
        return None
    from plan_file import read
    from settings import MODEL_PARAMS

    try:
        return read(os.path.join(os.path.dirname(where), step["plan"]), MODEL_PARAMS).recorded
    except (InputError, OSError):
        return None


def run_calibration(s, out, reads=None):
    from cluster.calibrate import calibrate, nccl_paths, read_measurements, render_toml
    from cluster.config import record
    from planner import cluster_for

    if s.evaluate is not None or s.plan is not None or s.sweep or s.plans or s.plot or s.compare or s.require_fit:
        raise UsageError("--calibrate fits a cluster: it takes no --evaluate, --plan, --compare, --require-fit or "
                         "sweep")
    if s.output is not None or s.dump_graph or getattr(s, "export", None):
        raise UsageError("--calibrate writes a cluster file (--save-cluster), not a plan: it takes no --output, "
                         "-d or --export")
    data = read_measurements(s.calibrate)
    if s.save_cluster is not None and not s.save_cluster.lower().endswith(".toml"):
        raise UsageError(f"--save-cluster: {s.save_cluster} must end in .toml: the fitted cluster is written as TOML, "
                         "and --cluster reads a file as TOML by that ending")
    if s.save_cluster is not None:
        mine = {os.path.realpath(s.calibrate)}
        mine.update(os.path.realpath(p) for p in nccl_paths(data, s.calibrate))
        if isinstance(data.get("step"), dict) and isinstance(data["step"].get("plan"), str):
            mine.add(os.path.realpath(os.path.join(os.path.dirname(s.calibrate), data["step"]["plan"])))
        if os.path.realpath(s.save_cluster) in mine:
            raise UsageError(f"--save-cluster: {s.save_cluster} is one of the measurements' files; give another "
                             "path")
        check_writable(s.save_cluster, "--save-cluster", reads)
    base = cluster_for(s)
    # the fields a framework, else the device, supplies by default: fitted from the base they give, and left out of
    # the fitted cluster unless fitted or given, so that the framework in force where the file is used supplies its own
    from frameworks.planning import FRAMEWORK_FIELDS, framework_cluster, framework_for, stated
    from planner import _cluster_file

    file = _cluster_file(s)
    given = stated(s, file)
    step_record = _step_record(data, s.calibrate)
    fw = framework_for(s, step_record or {}, base, file)
    if fw is not None:
        base, _ = framework_cluster(s, {}, base, fw, file)

    def predict(fields: dict) -> float:
        from planner import plan

        step = data["step"]
        path = os.path.join(os.path.dirname(s.calibrate), str(step["plan"]))
        if not os.path.isfile(path):
            raise InputError(f"--calibrate: {s.calibrate}: step.plan: {path}: no such plan file")
        if step_record is not None and step_record.get("procs") is None:  # -p cannot stand in for them here
            raise InputError(f"--calibrate: {s.calibrate}: step.plan: {path} records no procs (the devices "
                             "the timed step ran on)")
        return plan(replace(s, calibrate=None, save_cluster=None, evaluate=path, explicit=s.explicit - {"procs"},
                            **fields)).result.step_seconds  # the plan's own devices

    fields, lines, details = calibrate(data, base, s.calibrate, predict)
    fitted = replace(base, **fields)
    saved = {k: (None if k in FRAMEWORK_FIELDS and k not in fields and k not in given else v)
             for k, v in record(fitted).items()}
    text = render_toml(saved, lines, s.calibrate)
    if s.save_cluster is not None:
        try:
            write_atomic(s.save_cluster, text)
        except OSError as e:
            raise OSError(f"--save-cluster: could not write {s.save_cluster}: {e.strerror or e}") from None
    print(f"Calibrated from {s.calibrate}:", file=out)
    for line in lines:
        print(f"  {line}", file=out)
    if details:
        print("Collective times, measured and modelled (the model's own, after the fit):", file=out)
        for line in details:
            print(f"  {line}", file=out)
    if s.save_cluster is not None:
        print(f"Wrote the fitted cluster to {s.save_cluster}; use it with --cluster {s.save_cluster}", file=out)
    else:
        print(file=out)
        out.write(text)
    return fitted
