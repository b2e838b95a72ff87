"""Calibration: the realistic model's constants fitted to what was measured.

A measurements file (TOML or JSON) holds any of:

* ``gemm``: matrix products timed on one device, a list of tables
  ``{m, n, k, seconds}`` (or ``tflops`` for the rate measured, counting a
  multiply-add as two) -> ``matmul_eff``: the median over the products of
  the share of the peak each reached, its tiles' waves (``sms``) taken into
  account as the model takes them;
* ``attention``: fused attention kernels timed forward and backward, a list
  of ``{batch, heads, seq, head_dim, seconds}`` (``causal = true`` halves
  the work) -> ``attention_eff``, the FLOP counted as FlashAttention counts
  them: ``4 b h s^2 d`` forward, 2.5 times that backward;
* ``nccl``: the output of nccl-tests' ``all_reduce_perf`` (the text itself,
  or ``nccl_file``, a path relative to the measurements file), from which
  the ranks and the hosts are read off its ``# Rank`` lines (or ``gpus`` and
  ``nodes``) -> on one node ``link_eff`` (the bus bandwidth of the largest
  message over ``bw``) and ``latency`` (the smallest message's time over the ring's
  ``2 (n - 1)`` steps); across nodes ``net_eff`` (over ``inter_bw``) and
  ``inter_latency``;
* ``step``: ``{plan, seconds}``, a measured step time of a plan file
  (written with ``--output``) -> one factor on ``matmul_eff``,
  ``attention_eff`` and ``memory_eff`` (after the fits above) that makes the
  predicted step time the measured one.

Each fit starts from the cluster the other settings describe (a
``--device`` preset, a cluster file, flags), and :func:`calibrate` returns
the fitted fields and a line per fit saying from what.
"""

from __future__ import annotations

import math
import os
import re

from errors import InputError

__all__ = ["read_measurements", "calibrate", "parse_all_reduce_perf", "render_toml", "KEYS"]

KEYS = ("gemm", "attention", "nccl", "nccl_file", "gpus", "nodes", "step")
MAX_BYTES = 8 << 20


def read_measurements(path: str) -> dict:
    """The measurements file at ``path`` as a table (TOML, or JSON by its
    suffix); one-line errors naming the file."""
    from readers import read_text

    try:
        text = read_text(path, MAX_BYTES, "measurements file")
    except InputError as e:
        raise InputError(f"--calibrate: {e}") from None
    if path.lower().endswith(".json"):
        import json

        try:
            data = json.loads(text)
        except ValueError as e:
            raise InputError(f"--calibrate: {path} is not valid JSON: {e}") from None
    else:
        import tomllib

        try:
            data = tomllib.loads(text)
        except ValueError as e:
            raise InputError(f"--calibrate: {path} is not valid TOML: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise InputError(f"--calibrate: {path} must hold a table of measurements")
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise InputError(f"--calibrate: {path}: unknown key {unknown[0]!r}; the keys are {', '.join(KEYS)}")
    if not any(k in data for k in ("gemm", "attention", "nccl", "nccl_file", "step")):
        raise InputError(f"--calibrate: {path} has no measurements (gemm, attention, nccl, nccl_file or step)")
    if "nccl_file" in data:
        if not isinstance(data["nccl_file"], str):
            raise InputError(f"--calibrate: {path}: nccl_file must be a path")
        nccl = os.path.join(os.path.dirname(path), data["nccl_file"])
        try:
            data = {**data, "nccl": read_text(nccl, MAX_BYTES, "nccl-tests output")}
        except InputError as e:
            raise InputError(f"--calibrate: {path}: nccl_file: {e}") from None
    return data


def _number(x, where: str, positive=True) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or (positive and x <= 0):
        raise InputError(f"--calibrate: {where} must be a positive number, got {x!r}")
    return float(x)


def _rows(data: dict, key: str, need: tuple, where: str) -> list[dict]:
    rows = data[key]
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise InputError(f"--calibrate: {where}: {key} must be a list of tables")
    out = []
    for i, r in enumerate(rows):
        for k in need:
            if k not in r:
                raise InputError(f"--calibrate: {where}: {key}[{i}] lacks {k}")
        if ("seconds" in r) == ("tflops" in r):
            raise InputError(f"--calibrate: {where}: {key}[{i}] needs seconds or tflops (one of them)")
        out.append(r)
    return out


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def _disagreement(what: str, sizes: list, rates: list[float]) -> str:
    """A warning when measurements of the same size are more than 2x apart
    (a clock throttled, a cold start, a typo): ``""`` otherwise."""
    seen: dict = {}
    for size, rate in zip(sizes, rates):
        seen.setdefault(size, []).append(rate)
    for size, rs in seen.items():
        if max(rs) > 2 * min(rs):
            shown = " ".join(k if v is True else f"{k}={v}" for k, v in size if v is not False)
            return (f"; warning: {what} of the same size ({shown}) ran from {min(rs):.3g} to {max(rs):.3g} "
                    "TFLOPS, more than 2x apart: check them")
    return ""


def _fit_gemm(rows, cluster, where) -> tuple[float, str]:
    from cost_model import _wave_share

    peak = cluster.flops * 1e12
    shares, rates = [], []
    for i, r in enumerate(rows):
        m, n, k = (_number(r[x], f"{where}: gemm[{i}].{x}") for x in "mnk")
        flop = 2.0 * m * n * k
        t = _number(r["seconds"], f"{where}: gemm[{i}].seconds") if "seconds" in r else \
            flop / (_number(r["tflops"], f"{where}: gemm[{i}].tflops") * 1e12)
        waves = float(_wave_share(m, n, 1.0, cluster.sms)) if cluster.sms else 1.0
        shares.append(flop / (t * peak * waves))
        rates.append(flop / t / 1e12)
    eff = _median(shares)
    if eff > 1.0:
        raise InputError(f"--calibrate: {where}: the matrix products ran at {eff:.3g} times the peak of "
                         f"{cluster.flops:g} TFLOPS: check their sizes, times and the device")
    return eff, (f"matmul_eff {cluster.matmul_eff:g} -> {eff:.3f}: the median of {len(rows)} matrix products' "
                 f"share of {cluster.flops:g} TFLOPS (their waves of tiles counted)"
                 + _disagreement("matrix products", [tuple((x, r[x]) for x in "mnk") for r in rows], rates))


def _fit_attention(rows, cluster, where) -> tuple[float, str]:
    peak = cluster.flops * 1e12
    shares = []
    for i, r in enumerate(rows):
        b, h, s, d = (_number(r[x], f"{where}: attention[{i}].{x}") for x in ("batch", "heads", "seq", "head_dim"))
        causal = r.get("causal", False)
        if not isinstance(causal, bool):
            raise InputError(f"--calibrate: {where}: attention[{i}].causal must be true or false, got {causal!r}")
        flop = 3.5 * 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
        t = _number(r["seconds"], f"{where}: attention[{i}].seconds") if "seconds" in r else \
            flop / (_number(r["tflops"], f"{where}: attention[{i}].tflops") * 1e12)
        shares.append(flop / (t * peak))
    sizes = [tuple((x, r[x]) for x in ("batch", "heads", "seq", "head_dim")) + (("causal", r.get("causal", False)),)
             for r in rows]
    eff = _median(shares)
    if eff > 1.0:
        raise InputError(f"--calibrate: {where}: the attentions ran at {eff:.3g} times the peak of "
                         f"{cluster.flops:g} TFLOPS: check their sizes, times and the device")
    return eff, (f"attention_eff {cluster.attention_eff:g} -> {eff:.3f}: the median of {len(rows)} fused "
                 "attentions, forward and backward"
                 + _disagreement("attentions", sizes, [share * cluster.flops for share in shares]))


_RANK = re.compile(r"^#\s*Rank\s+(\d+).*?\bon\s+(\S+)")


def parse_all_reduce_perf(text: str) -> tuple[list[tuple[float, float, float]], int, int]:
    """``(bytes, out-of-place microseconds, bus GB/s)`` per size line of
    nccl-tests' ``all_reduce_perf`` output, with the ranks and hosts its
    ``# Rank`` lines name (0, 0 when it has none)."""
    rows, ranks, hosts = [], set(), set()
    for line in text.splitlines():
        m = _RANK.match(line.strip())
        if m:
            ranks.add(int(m.group(1)))
            hosts.add(m.group(2))
            continue
        parts = line.split()
        if not parts or parts[0].startswith("#") or len(parts) < 8:
            continue
        try:
            size = float(parts[0])
            # ... time algbw busbw #wrong time algbw busbw #wrong: the out-of-place figures are the
            # eighth to sixth fields from the end, whatever columns come first (root only in later versions)
            nums = [float(x) for x in parts[-8:-5]]
        except ValueError:
            continue
        if size > 0:
            rows.append((size, nums[0], nums[2]))
    return rows, len(ranks), len(hosts)


def _fit_nccl(data, cluster, where) -> tuple[dict, list[str]]:
    text = data["nccl"]
    if not isinstance(text, str):
        raise InputError(f"--calibrate: {where}: nccl must be the text of all_reduce_perf's output")
    rows, ranks, hosts = parse_all_reduce_perf(text)
    if not rows:
        raise InputError(f"--calibrate: {where}: no size lines in the all_reduce_perf output")
    gpus = int(_number(data["gpus"], f"{where}: gpus")) if "gpus" in data else ranks
    nodes = int(_number(data["nodes"], f"{where}: nodes")) if "nodes" in data else max(hosts, 1)
    if gpus < 2:
        raise InputError(f"--calibrate: {where}: the all_reduce_perf output names no ranks; give gpus (and nodes)")
    largest = max(rows)
    smallest = min(rows)
    bus = largest[2]  # GB/s
    if not bus > 0 or not smallest[1] > 0:
        raise InputError(f"--calibrate: {where}: the all_reduce_perf output's largest message has no bus bandwidth "
                         "(or its smallest no time)")
    steps = 2.0 * (gpus - 1)
    if nodes <= 1:
        eff_key, lat_key, bw, flag, span = "link_eff", "latency", cluster.bw, "--bw", "one node"
        lat_was = cluster.latency
    else:
        if cluster.inter_bw is None:
            raise InputError(f"--calibrate: {where}: the all_reduce_perf output spans {nodes} nodes; give the network "
                             "between them (--inter-bw or --network, with --gpus-per-node)")
        eff_key, lat_key, bw, flag, span = "net_eff", "inter_latency", cluster.inter_bw, "--inter-bw", f"{nodes} nodes"
        lat_was = cluster.latency if cluster.inter_latency is None else cluster.inter_latency
    eff = min(bus / bw, 1.0)
    lat = smallest[1] / steps
    return {eff_key: eff, lat_key: lat}, [
        f"{eff_key} {getattr(cluster, eff_key):g} -> {eff:.3f}: bus bandwidth {bus:g} GB/s at {largest[0]:.3g} "
        f"bytes over {flag} {bw:g} GB/s ({gpus} devices on {span})",
        f"{lat_key} {lat_was:g} -> {lat:.3g} us: {smallest[1]:g} us at {smallest[0]:.3g} bytes over the ring's "
        f"{steps:g} steps"]


def _fit_step(step, fields: dict, cluster, where, predict) -> tuple[dict, str]:
    """One factor on the compute efficiencies that makes ``predict(fields)``
    (the plan's predicted step, seconds) the measured time."""
    if not isinstance(step, dict) or "plan" not in step or "seconds" not in step:
        raise InputError(f"--calibrate: {where}: step must be a table with plan and seconds")
    want = _number(step["seconds"], f"{where}: step.seconds")
    effs = {k: fields.get(k, getattr(cluster, k)) for k in ("matmul_eff", "attention_eff", "memory_eff")}
    top = 1.0 / max(effs.values())  # no efficiency above 1

    def at(f):
        return predict({**fields, **{k: v * f for k, v in effs.items()}})

    lo, hi = 1e-3, top
    if at(hi) > want:
        raise InputError(f"--calibrate: {where}: the measured step ({want:g} s) is faster than the plan can be "
                         f"with every efficiency at 1 ({at(hi):.4g} s): check the plan and the cluster")
    if at(lo) < want:
        raise InputError(f"--calibrate: {where}: the measured step ({want:g} s) is slower than the model reaches "
                         "at any efficiency; check the plan and the cluster")
    for _ in range(40):  # the step time falls as the efficiencies rise
        mid = math.sqrt(lo * hi)
        if at(mid) > want:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-4:
            break
    f = math.sqrt(lo * hi)
    out = {k: v * f for k, v in effs.items()}
    return out, (f"matmul_eff, attention_eff, memory_eff times {f:.3f} -> "
                 f"{', '.join(f'{v:.3f}' for v in out.values())}: the plan {step['plan']} predicted "
                 f"{want:g} s, as measured")


def calibrate(data: dict, cluster, where: str, predict=None) -> tuple[dict, list[str]]:
    """The fitted cluster fields and a line per fit (see the module
    docstring); ``cluster`` the one the settings describe; ``predict(fields)``
    the step time (seconds) of the measurements' plan under the cluster with
    ``fields`` changed (needed for ``step``)."""
    if not cluster.realistic:
        raise InputError("--calibrate fits the realistic model's constants: give a real --device (or a cluster "
                         "file naming one)")
    fields, lines = {}, []
    if "gemm" in data:
        eff, line = _fit_gemm(_rows(data, "gemm", ("m", "n", "k"), where), cluster, where)
        fields["matmul_eff"] = eff
        lines.append(line)
    if "attention" in data:
        eff, line = _fit_attention(_rows(data, "attention", ("batch", "heads", "seq", "head_dim"), where),
                                   cluster, where)
        fields["attention_eff"] = eff
        lines.append(line)
    if "nccl" in data:
        f, ls = _fit_nccl(data, cluster, where)
        fields.update(f)
        lines += ls
    if "step" in data:
        f, line = _fit_step(data["step"], fields, cluster, where, predict)
        fields.update(f)
        lines.append(line)
    return fields, lines


def render_toml(record: dict, lines: list[str], source: str) -> str:
    """A cluster file (TOML) of ``record`` (the fitted cluster's fields),
    with the fits as comments."""
    out = [f"# cluster fitted to the measurements in {source}"]
    out += [f"# {line}" for line in lines]
    for k, v in record.items():
        if v is None:
            continue
        if isinstance(v, str):
            out.append(f'{k} = "{v}"')
        elif isinstance(v, float):
            out.append(f"{k} = {v!r}")
        else:
            out.append(f"{k} = {v}")
    return "\n".join(out) + "\n"
