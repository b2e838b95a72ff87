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
* ``nccl``: outputs of nccl-tests (the text, or ``nccl_file``: a path or
  a list of paths relative to the measurements file; or the output itself
  given to ``--calibrate``): ``all_reduce_perf``, ``all_gather_perf``,
  ``reduce_scatter_perf`` and ``sendrecv_perf``, as launchers print them
  (:mod:`cluster.nccl`), the ranks and hosts read off their ``# Rank``
  lines (or ``gpus`` and ``nodes``) -> ``link_eff``, ``allreduce_eff`` and
  ``latency`` from tests on one node, ``net_eff`` and ``inter_latency`` from
  tests across nodes, fitted through the model's own collectives
  (:mod:`cluster.netfit`);
* ``step``: ``{plan, seconds}``, a measured step time of a plan file
  (written with ``--output``) -> one factor on ``matmul_eff``,
  ``attention_eff`` and ``memory_eff`` (after the fits above) that makes the
  predicted step time the measured one.

Each fit starts from the cluster the other settings describe (a
``--device`` preset, a cluster file, flags), and :func:`calibrate` returns
the fitted fields, a line per fit saying from what, and the tables of
measured against modelled collective times.
"""

from __future__ import annotations

import math
import os

from errors import InputError

__all__ = ["read_measurements", "calibrate", "nccl_tables", "render_toml", "KEYS"]

KEYS = ("gemm", "attention", "nccl", "nccl_file", "gpus", "nodes", "step")
MAX_BYTES = 8 << 20


def nccl_paths(data: dict, path: str) -> list[str]:
    """The nccl-tests outputs the measurements file at ``path`` names
    (``nccl_file``: one path or a list, relative to the file)."""
    files = data.get("nccl_file", [])
    files = [files] if isinstance(files, str) else files
    if not isinstance(files, list) or not all(isinstance(f, str) and f for f in files):
        raise InputError(f"--calibrate: {path}: nccl_file must be a path or a list of paths")
    return [os.path.join(os.path.dirname(path), f) for f in files]


def read_measurements(path: str) -> dict:
    """The measurements file at ``path`` as a table (TOML, or JSON by its
    suffix), or an nccl-tests output itself; one-line errors naming the
    file."""
    from cluster.nccl import json_output, looks_like_output
    from readers import read_text

    try:
        text = read_text(path, MAX_BYTES, "measurements file")
    except InputError as e:
        raise InputError(f"--calibrate: {e}") from None
    if json_output(text) is not None:  # the JSON nccl-tests writes (-J)
        return {"nccl": [text], "_nccl_names": [os.path.basename(path)]}
    is_json = path.lower().endswith(".json")
    if is_json:
        from json import loads
    else:
        from tomllib import loads
    try:
        data = loads(text)
    except RecursionError:
        raise InputError(f"--calibrate: {path} is nested too deeply to be a file of measurements") from None
    except ValueError as e:
        if is_json:
            raise InputError(f"--calibrate: {path} is not valid JSON: {e}") from None
        if not looks_like_output(text):
            raise InputError(f"--calibrate: {path} is not valid TOML: {str(e).splitlines()[0]}") from None
        data = None
    if not is_json and not data and looks_like_output(text):  # the output of nccl-tests itself
        return {"nccl": [text], "_nccl_names": [os.path.basename(path)]}
    if not isinstance(data, dict):
        raise InputError(f"--calibrate: {path} must hold a table of measurements")
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise InputError(f"--calibrate: {path}: unknown key {unknown[0]!r}; the keys are {', '.join(KEYS)}")
    if not any(k in data for k in ("gemm", "attention", "nccl", "nccl_file", "step")):
        raise InputError(f"--calibrate: {path} has no measurements (gemm, attention, nccl, nccl_file or step)")
    if "nccl_file" in data:
        texts, names = [], []
        for f in nccl_paths(data, path):
            try:
                texts.append(read_text(f, MAX_BYTES, "nccl-tests output"))
            except InputError as e:
                raise InputError(f"--calibrate: {path}: nccl_file: {e}") from None
            names.append(os.path.basename(f))
        if "nccl" in data:
            extra = [data["nccl"]] if isinstance(data["nccl"], str) else data["nccl"]
            if not isinstance(extra, list):
                raise InputError(f"--calibrate: {path}: nccl must be the text of an nccl-tests output (or a list "
                                 "of them)")
            texts, names = texts + extra, names + [f"nccl[{i}]" for i in range(len(extra))]
        data = {**data, "nccl": texts, "_nccl_names": names}
    return data


def _number(x, where: str, positive=True) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or (positive and x <= 0):
        raise InputError(f"--calibrate: {where} must be a positive number, got {x!r}")
    return float(x)


def _rows(data: dict, key: str, need: tuple, where: str, optional: tuple = ()) -> list[dict]:
    """The tables of ``key``: each with the sizes ``need`` (whole numbers),
    ``seconds`` or ``tflops``, and perhaps the keys ``optional``; no other."""
    rows = data[key]
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise InputError(f"--calibrate: {where}: {key} must be a list of tables")
    out = []
    keys = need + optional + ("seconds", "tflops")
    for i, r in enumerate(rows):
        unknown = sorted(k for k in r if k not in keys)
        if unknown:
            raise InputError(f"--calibrate: {where}: {key}[{i}] has an unknown key {unknown[0]!r}; its keys are "
                             f"{', '.join(keys)}")
        for k in need:
            if k not in r:
                raise InputError(f"--calibrate: {where}: {key}[{i}] lacks {k}")
            x = r[k]
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not (
                    isinstance(x, int) or (math.isfinite(x) and x.is_integer())) or x < 1:
                raise InputError(f"--calibrate: {where}: {key}[{i}].{k} must be a whole number of 1 or more, "
                                 f"got {r[k]!r}")
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
    from cost.time import wave_share

    peak = cluster.flops * 1e12
    shares, rates = [], []
    for i, r in enumerate(rows):
        m, n, k = (_number(r[x], f"{where}: gemm[{i}].{x}") for x in "mnk")
        flop = 2.0 * m * n * k
        t = _number(r["seconds"], f"{where}: gemm[{i}].seconds") if "seconds" in r else \
            flop / (_number(r["tflops"], f"{where}: gemm[{i}].tflops") * 1e12)
        waves = float(wave_share(m, n, 1.0, cluster.sms)) if cluster.sms else 1.0
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


def _outputs(data: dict, where: str) -> list[tuple[str, str]]:
    """The nccl-tests outputs of the measurements: (name, text) each."""
    texts = data["nccl"]
    names = data.get("_nccl_names")
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise InputError(f"--calibrate: {where}: nccl must be the text of an nccl-tests output (or a list of them)")
    if not names:
        names = ["nccl" if len(texts) == 1 else f"nccl[{i}]" for i in range(len(texts))]
    return list(zip(names, texts))


def _count(data: dict, key: str, where: str) -> int | None:
    if key not in data:
        return None
    x = data[key]
    if isinstance(x, bool) or not isinstance(x, int) or x < 1:
        raise InputError(f"--calibrate: {where}: {key} must be a positive integer, got {x!r}")
    return x


def _unread(run) -> str:
    """``2 size lines (lines 17, 18)``: the size lines (or -J's results)
    of ``run`` whose figures did not read."""
    n, what = len(run.unread), "size line" if run.unread_in == "line" else "result"
    at = ", ".join(map(str, run.unread[:3])) + (", ..." if n > 3 else "")
    return f"{n} {what}{'s' * (n > 1)} ({run.unread_in}{'s' * (n > 1)} {at})"


def nccl_tables(data: dict, where: str) -> tuple[list, list[str]]:
    """The tests of the measurements' nccl-tests outputs the model can
    fit (:class:`cluster.netfit.Table`), and a line per test left out."""
    from cluster.nccl import FITTED, collective, ranks_read_off, runs
    from cluster.netfit import Table

    gpus, nodes = _count(data, "gpus", where), _count(data, "nodes", where)
    tables, skipped = [], []
    for name, text in _outputs(data, where):
        found = runs(text, name)
        unread = [f"{name}: a test left out: no time and bandwidths read in any of its {_unread(r)}"
                  for r in found if not r.rows]  # a test none of whose size lines reads
        skipped += unread
        found = [r for r in found if r.rows]
        if not found and unread:
            raise InputError(f"--calibrate: {where}: {unread[0]}")
        if not found:
            raise InputError(f"--calibrate: {where}: {name}: no size lines in the nccl-tests output (the table under "
                             "its '#  size  count  type ...' header)")
        zero = [r for r in found if all(x.busbw == 0 for x in r.rows if x.algbw >= 1.0)
                and any(x.algbw >= 1.0 for x in r.rows)]
        alone = [r for r in found if r.repeated or (len(r.ranks) == 1 and gpus is None) or any(r is z for z in zero)]
        if alone:
            r = alone[0]
            many = max(len(s) for s in r.ranks.values()) if r.ranks else 0
            what = (f"rank {min(r.ranks)} is printed by {many} processes" if r.repeated else
                    f"it holds {len(alone)} tests of one rank each" if len(alone) > 1 else
                    "it ran on one rank" if len(r.ranks) == 1 else "its bus bandwidth is 0 at every size")
            raise InputError(f"--calibrate: {where}: {name}: {what}: the ranks ran alone, each its own test, and "
                             "nothing crossed a link (nccl-tests built without MPI, or started once per device): "
                             "build it with MPI=1 and launch all the ranks as one test (mpirun, srun), or run one "
                             "process over the node's devices (-g 8)")
        for r in found:
            n = gpus if gpus is not None else len(r.ranks)
            h = nodes if nodes is not None else max(len(r.hosts), 1)
            if n == 0:
                guess = ranks_read_off(r)
                seen = f"; its table suggests {guess} ranks" if guess else ""
                raise InputError(f"--calibrate: {where}: {name}: the output names no ranks (no '# Rank' lines{seen}): "
                                 f"give gpus and nodes in a measurements file (as: nccl_file = \"{name}\", gpus = "
                                 f"{guess or 8}, nodes = 1)")
            if n < 2:
                raise InputError(f"--calibrate: {where}: {name}: one rank: nothing crossed a link; measure over two "
                                 "devices or more")
            if n % h:
                raise InputError(f"--calibrate: {where}: {name}: {n} ranks on {h} nodes: the model spreads devices "
                                 "evenly over nodes; give gpus and nodes")
            if gpus is None and nodes is None and h > 1:  # read off the '# Rank' lines: as many on each host
                per_host = {}
                for seen in r.ranks.values():
                    for host in {x for _, x in seen}:
                        per_host[host] = per_host.get(host, 0) + 1
                if len(set(per_host.values())) > 1:
                    counts = ", ".join(f"{per_host[x]} on {x}" for x in sorted(per_host))
                    raise InputError(f"--calibrate: {where}: {name}: {n} ranks on {h} nodes unevenly ({counts}): "
                                     "the model spreads devices evenly over nodes; measure as many on each node")
            test, note = collective(r, n)
            if test not in FITTED:
                skipped.append(f"{name}: {test}_perf left out: the model has no {test.replace('_', '-')} "
                               f"(it uses all_reduce, all_gather, reduce_scatter and sendrecv)")
                continue
            if r.unread:
                skipped.append(f"{name}: {_unread(r)} of its {test} test left out: no time and bandwidths read in "
                               f"{'them' if len(r.unread) > 1 else 'it'}")
            rows = [x for x in r.rows if x.seconds > 0]
            tables.append(Table(test, n, h, [x.size for x in rows], [x.seconds for x in rows],
                                [x.busbw for x in rows], [x.algbw for x in rows], name, note))
    if not tables:
        raise InputError(f"--calibrate: {where}: {skipped[0] if skipped else 'no test to fit'}")
    return tables, skipped


def _fit_nccl(data, cluster, where) -> tuple[dict, list[str], list[str]]:
    from cluster.netfit import fit_network

    tables, skipped = nccl_tables(data, where)
    fields, lines, details = fit_network(tables, cluster, where)
    return fields, skipped + lines, details


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
    """The fitted cluster fields, a line per fit (see the module
    docstring) and the tables of measured against modelled collective times;
    ``cluster`` the one the settings describe; ``predict(fields)`` the step
    time (seconds) of the measurements' plan under the cluster with
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
        eff, line = _fit_attention(_rows(data, "attention", ("batch", "heads", "seq", "head_dim"), where, ("causal",)),
                                   cluster, where)
        fields["attention_eff"] = eff
        lines.append(line)
    details = []
    if "nccl" in data:
        f, ls, details = _fit_nccl(data, cluster, where)
        fields.update(f)
        lines += ls
    if "step" in data:
        f, line = _fit_step(data["step"], fields, cluster, where, predict)
        fields.update(f)
        lines.append(line)
    return fields, lines, details


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
