"""Run PaSE plans on XLA's SPMD partitioner (JAX, CPU devices) and check them.

For a graph (AlexNet, Transformer), p and plans (default: the tool's best
strategy and the data-parallel baseline), on p virtual CPU devices:

1. numerics: one training step sharded by the plan against the same step
   unsharded, on shrunk sizes: the loss and every gradient must agree within
   float32 tolerance (a plan that compiles is not yet a plan that is right);
2. communication: the step compiled at the full size, the collectives of the
   compiled HLO (all-reduce, all-gather, reduce-scatter, all-to-all,
   collective-permute) turned into per-device ring traffic and attributed to
   layers, beside the cost model's prediction for the same plan;
3. time: compile time at full size and step time at the shrunk size
   (informative only: the virtual devices share the machine's cores).

The plans run as ``scheduler.py --export jax`` writes them: each plan's
shardings are made by the exporter (``exports/frameworks/jax_mesh.py``)
and read back by its loader (``exports/jax_loader.py``).  ``--sharding
FILE`` runs such a file itself, for any model the tool reads (a Hugging
Face ``config.json`` too): the JAX model is then built from the graph
(``jax/graph_model.py``), at the sizes the file was written for, and the
collectives of each matrix-product layer must be those the cost model
charges (their kinds, groups and counts).

    pip install -r benchmarks/jax/requirements.txt
    python benchmarks/jax_validate.py                       # AlexNet and Transformer, p = 8
    python benchmarks/jax_validate.py -g transformer --plan plan.json --plan dp.json
    python benchmarks/jax_validate.py --quick               # small sizes only (the test)
    python scheduler.py -g config.json -p 8 -b 16 --seq 64 --plan tp=2 --export jax:tp2.json
    python benchmarks/jax_validate.py --sharding tp2.json   # an exported plan of any model
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "jax"))

from hlo import collectives, comm_table, fmt, layer_of, locality_table  # noqa: E402


# -- plans ------------------------------------------------------------------------------


def mesh_plan(g, strategy, p: int):
    """The shardings of ``strategy`` as ``--export jax`` writes them (the
    exporter's document), read back by the export's loader."""
    from exports.frameworks.jax_mesh import document
    from exports.jax_loader import from_document

    return from_document(json.loads(json.dumps(document(g, strategy, p))))


def plans_for(graph: str, p: int, files: list[str], with_expert: bool = False):
    """[(label, strategy)]: the given plan files, or PaSE's best and data
    parallel (and the expert baseline)."""
    from baselines import data_parallel, expert
    from cost_model import build_costs
    from dp_search import search
    from models import build_graph
    from plan_file import decisions, read

    g = build_graph(graph)
    if files:
        out = []
        for path in files:
            file = read(path)
            out.append((Path(path).stem, decisions(g, file)))
        return g, out
    out = [("PaSE", search(build_costs(g, p), 0).strategy), ("data parallel", data_parallel(g, p))]
    if with_expert:
        strategy, label = expert(g, p)
        out.append((f"expert ({label})", strategy))
    return g, out


def predicted_words(g, strategy) -> dict[str, tuple[float, float]]:
    """The cost model's communication per layer, in elements per device: the
    operator's own, and the re-distribution of the tensors it reads."""
    from cost_model import CostModel, evaluate
    from graph import operators

    model = CostModel()
    sc = evaluate(g, strategy, model)
    ops = operators(g)
    own = {op.name: sc.comm[v] / model.cluster.word for v, op in enumerate(ops)}
    edges = dict.fromkeys(own, 0.0)
    for (u, v), c in sc.edges.items():
        edges[ops[v].name] += c / model.cluster.word
    return {name: (own[name], edges[name]) for name in own}


def predicted_locality(g, strategy, per_node: int) -> dict[str, tuple[float, float]]:
    """The cost model's communication per layer (its own and the tensors it
    reads) split into elements moved inside a node and between nodes, on a
    cluster of ``per_node`` devices per node: costed at two inter-node
    bandwidths, the difference gives the inter-node words exactly."""
    from cluster import Cluster
    from cost_model import CostModel, evaluate
    from graph import operators

    costs = []
    for inter in (16.0, 8.0):
        model = CostModel(Cluster(gpus_per_node=per_node, inter_bw=inter))
        sc = evaluate(g, strategy, model)
        per_layer = list(sc.comm)
        for (_, v), c in sc.edges.items():
            per_layer[v] += c
        costs.append((model.cluster, per_layer))
    (c1, a), (c2, b) = costs
    out = {}
    for op, x, y in zip(operators(g), a, b):
        across = (y - x) / (c2.inter_word - c1.inter_word)
        out[op.name] = ((x - across * c1.inter_word) / c1.word, across)
    return out


# -- models -----------------------------------------------------------------------------


def model_for(graph: str, small: bool):
    """(sizes, init params, make data, loss(params, *data, ctx), data input names)."""
    import jax_models as jm

    if graph == "alexnet":
        sz = jm.AlexNetSizes(batch=16, shrink=4) if small else jm.AlexNetSizes()
        return sz, jm.alexnet_params, jm.alexnet_data, jm.alexnet_loss
    if graph == "transformer":
        sz = (jm.TransformerSizes(batch=16, seq=16, width=64, heads=8, key_width=8, vocab=512, layers=1)
              if small else jm.TransformerSizes())
        return sz, jm.transformer_params, jm.transformer_data, jm.transformer_loss
    raise SystemExit(f"jax_validate.py: no JAX model for {graph!r} (alexnet, transformer)")


class _Axes(tuple):
    """Mesh axes of each axis of one tensor: a leaf of the spec trees below."""


def _data_specs(graph, mp):
    """Mesh axes of the data inputs, from the operators that read them."""
    L = mp.layers
    if graph == "alexnet":
        specs = [L["conv1"].inputs[0], (L["softmax"].inputs[0][0],)]
    else:
        specs = [L["enc/embed"].inputs[0], L["dec/embed"].inputs[0], L["enc/pos"].inputs[1],
                 L["softmax"].inputs[0][:2]]
    return [_Axes(s) for s in specs]


def _param_specs(params, mp):
    out = {}
    for name, value in params.items():
        layer = mp.layers[name]
        if isinstance(value, tuple):  # LayerNorm scale and bias: along the normalised axis
            out[name] = tuple(_Axes((layer.dims[-1],)) for _ in value)
        else:
            out[name] = _Axes(layer.inputs[1])
    return out


def _shardings(mesh, mp, tree):
    import jax
    from jax.sharding import NamedSharding

    return jax.tree.map(lambda axes: NamedSharding(mesh, mp.spec(axes)), tree,
                        is_leaf=lambda x: isinstance(x, _Axes))


def step_fn(loss, ctx):
    import jax

    def step(params, *data):
        return jax.value_and_grad(lambda prm: loss(prm, *data, ctx))(params)

    return step


def model_shapes(graph: str, small: bool):
    """Abstract parameters and every tensor shape the model reads or writes,
    by operator name, traced without computing anything."""
    import jax
    import jax_models as jm

    sz, init, make_data, loss = model_for(graph, small)
    ctx = jm.Ctx()
    params = jax.eval_shape(lambda: init(jax.random.PRNGKey(0), sz))
    data = jax.eval_shape(lambda: make_data(jax.random.PRNGKey(1), sz))
    jax.eval_shape(lambda prm, *d: loss(prm, *d, ctx), params, *data)
    return params, ctx.shapes


def check_divisible(graph, g, strategy, shapes):
    """The shrunk model (tensor ``shapes`` by operator) must still be split
    exactly as the plan says."""
    from graph import operators

    for op, d in zip(operators(g), strategy):
        for (kind, i), shape in shapes.get(op.name, {}).items():
            t = (op.inputs if kind == "in" else op.outputs)[i]
            for size, group in zip(shape, t.axes):
                split = math.prod(d[letter] for letter in group)
                if size % split:
                    raise SystemExit(f"jax_validate.py: the shrunk {graph} cannot be split like {op.name} "
                                     f"{d!r}: size {size} by {split}")


def _reference64(make_step, params, data):
    """The unsharded step in float64 on one device: the ground truth;
    ``make_step(ctx)`` makes the step (:func:`step_fn`, :func:`_graph_step`)."""
    import jax
    import jax.numpy as jnp
    import jax_models as jm
    import numpy as np

    params = jax.tree.map(np.asarray, params)
    data = [np.asarray(a) for a in data]
    jax.config.update("jax_enable_x64", True)
    try:
        p64 = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), params)
        d64 = [jnp.asarray(a, jnp.float64) if a.dtype == np.float32 else jnp.asarray(a) for a in data]
        out = jax.jit(make_step(jm.Ctx()))(p64, *d64)
        return jax.tree.map(np.asarray, out)
    finally:
        jax.config.update("jax_enable_x64", False)


def _max_error(ref, got):
    """(worst relative error, where): max |got - ref| / max |ref| per tensor."""
    import jax
    import numpy as np

    (ref_loss, ref_grads), (got_loss, got_grads) = ref, got
    pairs = [("loss", ref_loss, got_loss)] + [
        (jax.tree_util.keystr(path), a, b)
        for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(ref_grads), jax.tree.leaves(got_grads))]
    worst = (0.0, "loss")
    for name, a, b in pairs:
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        worst = max(worst, (float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-30)), name))
    return worst[0], worst[1], len(pairs)


TOLERANCE = 1e-4  # float32 against float64, relative to each tensor's largest entry
# XLA's CPU backend (jaxlib 0.10.2) fuses some dots and convolutions into
# experimental YNNPACK kernels whose float32 results are off by up to 12% here
# (conv1's weight gradient in AlexNet, the decoder's feed-forward in the
# Transformer), sharded or not; without them every step matches float64.
NO_YNN = "--xla_cpu_experimental_ynn_fusion_type="


def numerics(graph, mp, mesh, p):
    """The sharded float32 step against the unsharded step computed in float64;
    also the unsharded float32 step on one device, for comparison."""
    import jax
    import jax_models as jm

    sz, init, make_data, loss = model_for(graph, True)
    params = init(jax.random.PRNGKey(0), sz)
    data = make_data(jax.random.PRNGKey(1), sz)
    ref = _reference64(lambda ctx: step_fn(loss, ctx), params, data)
    one = jax.device_put((params, data), jax.devices()[0])
    single = jax.jit(step_fn(loss, jm.Ctx()))(one[0], *one[1])
    sharded = jax.jit(step_fn(loss, jm.Ctx(mp, mesh)),
                      in_shardings=(_shardings(mesh, mp, _param_specs(params, mp)),
                                    *_shardings(mesh, mp, _data_specs(graph, mp))),
                      out_shardings=(None, _shardings(mesh, mp, _param_specs(params, mp))))
    t0 = time.perf_counter()
    got = jax.block_until_ready(sharded(params, *data))
    first = time.perf_counter() - t0
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        jax.block_until_ready(sharded(params, *data))
        times.append(time.perf_counter() - t0)
    err, where, n = _max_error(ref, got)
    err1, where1, _ = _max_error(ref, single)
    return {"ok": err <= TOLERANCE, "max_rel_error": err, "worst": where, "tensors": n,
            "single_error": err1, "single_worst": where1, "first_step_s": first, "step_s": sorted(times)[1]}


def communication(graph, g, mp, mesh, p, strategy, small, per_node):
    """Compile at full (or small) size; per-layer measured and predicted traffic."""
    import jax
    import jax_models as jm
    from graph import operators

    sz, init, make_data, loss = model_for(graph, small)
    params = jax.eval_shape(lambda: init(jax.random.PRNGKey(0), sz))
    data = jax.eval_shape(lambda: make_data(jax.random.PRNGKey(1), sz))
    p_sh = _shardings(mesh, mp, _param_specs(params, mp))
    d_sh = _shardings(mesh, mp, _data_specs(graph, mp))
    fn = jax.jit(step_fn(loss, jm.Ctx(mp, mesh)), in_shardings=(p_sh, *d_sh), out_shardings=(None, p_sh))
    t0 = time.perf_counter()
    compiled = fn.lower(params, *data).compile()
    compile_s = time.perf_counter() - t0
    names = sorted((op.name for op in operators(g)), key=len, reverse=True)
    measured, locality, kinds = {}, {}, {}
    for c in collectives(compiled.as_text(), p):
        layer = layer_of(c.op_name, names)
        measured[layer] = measured.get(layer, 0.0) + c.traffic
        inside, across = locality.get(layer, (0.0, 0.0))
        share = c.across_share(per_node)
        locality[layer] = (inside + (1 - share) * c.traffic, across + share * c.traffic)
        kinds[c.kind] = kinds.get(c.kind, 0) + 1
    return {"compile_s": compile_s, "measured": measured, "predicted": predicted_words(g, strategy),
            "kinds": kinds, "locality": locality, "predicted_locality": predicted_locality(g, strategy, per_node)}


# -- exported plans of any model (--sharding) -------------------------------------------

#: the collective each pattern of the cost model's records is in XLA's programs
_HLO_KIND = {"allreduce": "all-reduce", "allgather": "all-gather", "reducescatter": "reduce-scatter",
             "send": "send", "cheapest": "cheapest"}
#: the layers whose collectives must be the cost model's: its matrix products
MATMUL_KINDS = ("Einsum", "FC", "Embedding")


def exported(path: str):
    """(document, graph, strategy) of a ``--export jax`` file: the graph is
    built again from the model and parameters the file names, and must be
    the one the file's operators describe."""
    from config_space import Decision
    from graph import operators
    from models import build_graph

    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if "graph" not in doc or "params" not in doc:
        raise SystemExit(f"jax_validate.py: {path} names no model (written by scheduler.py --export jax?)")
    g = build_graph(doc["graph"], **doc["params"])
    ops = operators(g)
    if [(op.name, list(op.space)) for op in ops] != [(o["name"], o["space"]) for o in doc["operators"]]:
        raise SystemExit(f"jax_validate.py: {path} does not describe the operators of {doc['graph']}")
    strategy = [Decision(op.dims, tuple(o["config"]), tuple(o.get("options", {}).items()))
                for op, o in zip(ops, doc["operators"])]
    return doc, g, strategy


def charged(g, strategy, model=None) -> dict:
    """Per layer, the collectives the cost model charges for ``strategy``,
    as XLA names them: a Counter of (kind, devices in the group).  A layer's
    weight gradients are reduced one weight tensor at a time (as XLA does),
    so a gradient collective the model charges once (a matrix product's,
    whose bias it does not price) stands for one per weight tensor."""
    from collections import Counter

    import numpy as np

    from blocks import find_chains
    from cost_model import CostModel, with_options
    from graph import operators
    from options import contexts

    model = CostModel() if model is None else model
    ctx = contexts(g, find_chains(g))
    out = {}
    for v, (op, d) in enumerate(zip(operators(g), strategy)):
        C, work, _ = with_options(op, [d.config], model, ctx[v], dict(d.options))
        weights = sum(t.role == "weight" for t in op.inputs)
        counts = Counter()
        for c in work.comms:
            group = int(round(float(np.ravel(C[c.letters])[0])))
            words = 1.0 if c.words is None else float(np.ravel(c.words)[0])
            if group > 1 and words > 0:
                times = max(int(round(c.count)), weights if c.role == "gradients" else 0)
                counts[(_HLO_KIND[c.pattern], group)] += times
        out[op.name] = counts
    return out


def measured_collectives(hlo: str, p: int, names) -> dict:
    """Per layer, the collectives of a compiled program: a Counter of (kind, group)."""
    from collections import Counter

    out = {}
    longest = sorted(names, key=len, reverse=True)
    for c in collectives(hlo, p):
        out.setdefault(layer_of(c.op_name, longest), Counter())[(c.kind, c.group)] += 1
    return out


def _graph_step(gm, ctx):
    import jax

    def step(params, *data):
        return jax.value_and_grad(lambda prm: gm.loss(prm, *data, ctx=ctx))(params)

    return step


def check_export(path: str, per_node: int, markdown: bool) -> int:
    """Run an exported plan (see the module docstring); the failures found."""
    from collections import Counter

    import jax
    import jax_models as jm
    from graph_model import GraphModel
    from jax.sharding import NamedSharding

    from exports.jax_loader import load
    from table import render

    doc, g, strategy = exported(path)
    mp = load(path)
    print(f"\n== {path}: {doc.get('model')}, p = {doc['procs']}: {doc.get('plan', '')} ==", flush=True)
    if len(mp.stages) > 1:
        print(f"a pipeline of {len(mp.stages)} stages: each stage is its own program; not run here")
        return 1
    mesh = mp.mesh()
    gm = GraphModel(g)
    params = gm.params(jax.random.PRNGKey(0))
    data = gm.data(jax.random.PRNGKey(1))
    p_sh = {gm.key(v, i): mp.sharding(mesh, gm.ops[v].name, "inputs", i) for v, i in gm.weights}
    d_sh = [mp.sharding(mesh, gm.ops[v].name, "inputs", i) for v, i in gm.data_inputs]
    d_sh.append(NamedSharding(mesh, mp.spec(mp.layers[gm.ops[gm.loss_node].name].inputs[0][:-1])))  # the labels
    fn = jax.jit(_graph_step(gm, jm.Ctx(mp, mesh)), in_shardings=(p_sh, *d_sh), out_shardings=(None, p_sh))
    t0 = time.perf_counter()
    compiled = fn.lower(params, *data).compile()  # once: run, and read its collectives
    got = jax.block_until_ready(compiled(params, *data))
    first = time.perf_counter() - t0
    err, where, n = _max_error(_reference64(lambda ctx: _graph_step(gm, ctx), params, data), got)
    ok = err <= TOLERANCE
    print(f"numerics: {'PASS' if ok else 'FAIL'}: {n} tensors (loss and gradients) of the sharded float32 step "
          f"against the unsharded step in float64: max relative error {err:.1e} ({where}; tolerance "
          f"{TOLERANCE:.0e}); compiled and run in {first:.1f} s")
    failures = not ok
    hlo = compiled.as_text()
    names = [op.name for op in gm.ops]
    got_c = measured_collectives(hlo, doc["procs"], names)
    want_c = charged(g, strategy)
    from cost_model import CostModel, evaluate

    moved = {v: c for v, c in evaluate(g, strategy, CostModel()).edges.items() if c > 0}
    touched = {gm.ops[x].name for edge in moved for x in edge}  # XLA names a re-distribution after either end
    rows, wrong = [], []
    kinds = {op.name: op.kind.name for op in gm.ops}

    def shown(counter):
        return ", ".join(f"{n} {k} of {grp}" for (k, grp), n in sorted(counter.items())) or "-"

    for name in names + ["(other)"]:
        w, m = want_c.get(name, Counter()), got_c.get(name, Counter())
        if not w and not m:
            continue
        checked = kinds.get(name) in MATMUL_KINDS and name not in touched
        same = w == m
        if checked and not same:
            wrong.append(name)
        verdict = ("yes" if same else "NO") if checked else ("yes" if same else "differs") + \
            (" (re-distributed)" if name in touched else "")
        rows.append([name, kinds.get(name, ""), shown(w), shown(m), verdict])
    checked = sum(kinds[n] in MATMUL_KINDS and n not in touched for n in names)
    print(f"collectives per layer (kind of collective, devices in its group), the cost model's own and XLA's; "
          f"the {checked} matrix-product layers no re-distribution touches must agree: "
          f"{'all do' if not wrong else f'{len(wrong)} do not'}")
    print(render(["layer", "kind", "cost model", "XLA", "same"], rows, markdown))
    failures += bool(wrong)
    edges = sum(moved.values())
    moves = Counter(k for layer in got_c.values() for (k, _), n in layer.items() for _ in range(n)
                    if k != "all-reduce")
    if edges == 0:
        verdict = "PASS" if not moves else "FAIL"
        failures += bool(moves)
        print(f"re-distribution: {verdict}: the cost model charges none between layers; XLA's program moves "
              f"{'nothing else' if not moves else dict(moves)}")
    else:
        print(f"re-distribution: the cost model charges {edges:.3g} FLOP between layers; XLA's program has "
              f"{dict(moves) or 'no'} collectives other than all-reduces")
    del per_node
    return failures


def _total(pred) -> float:
    return sum(o + e for o, e in pred.values())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-g", "--graph", nargs="+", default=["alexnet", "transformer"],
                    choices=["alexnet", "transformer"])
    ap.add_argument("-p", "--procs", type=int, default=8)
    ap.add_argument("--plan", action="append", default=[], metavar="JSON",
                    help="a plan written by scheduler.py --output (repeatable; default: PaSE and data parallel)")
    ap.add_argument("--sharding", action="append", default=[], metavar="JSON",
                    help="a plan written by scheduler.py --export jax (repeatable): run it on the model it names, "
                    "at its sizes, instead of -g")
    ap.add_argument("--expert", action="store_true", help="also run the expert baseline of scheduler.py --compare")
    ap.add_argument("--quick", action="store_true", help="small sizes only, also for the communication check")
    ap.add_argument("--gpus-per-node", type=int, default=None, metavar="G",
                    help="devices per node for the locality check, numbered node-major (default: p/2, two nodes)")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--xla-cpu-defaults", action="store_true",
                    help=f"keep XLA's experimental YNNPACK fusions on the CPU (default: off, {NO_YNN}): "
                    "they lose float32 accuracy on these models")
    args = ap.parse_args(argv)
    if "jax" in sys.modules:
        raise SystemExit("jax_validate.py: jax was imported before the device count could be set")
    spec = importlib.util.find_spec("jax")  # without importing it; benchmarks/jax alone is a mere directory
    if spec is None or spec.origin is None:
        raise SystemExit("jax_validate.py: jax is not installed: pip install -r benchmarks/jax/requirements.txt")
    if args.sharding:  # the devices the exported plans ask for
        procs = []
        for path in args.sharding:
            try:
                with open(path, encoding="utf-8") as f:
                    procs.append(int(json.load(f)["procs"]))
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise SystemExit(f"jax_validate.py: {path}: not a --export jax file ({e})") from None
        args.procs = max(procs)
    flags = f"--xla_force_host_platform_device_count={args.procs}"
    if not args.xla_cpu_defaults:
        flags += f" {NO_YNN}"
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flags}".strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # XLA's warnings about re-sharding: see benchmarks/jax/README.md
    import jax

    jax.config.update("jax_default_matmul_precision", "highest")
    from exports.frameworks.jax_mesh import PlanNotExpressible

    print(f"XLA_FLAGS={os.environ['XLA_FLAGS']}; jax {jax.__version__}, {len(jax.devices())} CPU devices")
    per_node = args.gpus_per_node or max(1, args.procs // 2)
    t_all = time.perf_counter()
    failures = 0
    if args.sharding:
        for path in args.sharding:
            failures += check_export(path, per_node, args.markdown)
        print(f"\nwhole validation: {time.perf_counter() - t_all:.0f} s")
        return 1 if failures else 0
    for graph in args.graph:
        g, plans = plans_for(graph, args.procs, args.plan if len(args.graph) == 1 else [], args.expert)
        _, small_shapes = model_shapes(graph, small=True)
        totals = {}
        for label, strategy in plans:
            print(f"\n== {graph}, p = {args.procs}: {label} ==", flush=True)
            try:
                mp = mesh_plan(g, strategy, args.procs)
            except PlanNotExpressible as e:
                print(f"cannot run this plan: {e}")
                failures += 1
                continue
            mesh = mp.mesh()
            check_divisible(graph, g, strategy, small_shapes)
            num = numerics(graph, mp, mesh, args.procs)
            verdict = "PASS" if num["ok"] else "FAIL"
            print(f"numerics: {verdict}: {num['tensors']} tensors (loss and gradients) of the sharded float32 "
                  f"step against the unsharded step in float64: max relative error {num['max_rel_error']:.1e} "
                  f"({num['worst']}; tolerance {TOLERANCE:.0e})")
            print(f"  unsharded float32 on one device: max relative error {num['single_error']:.1e} "
                  f"({num['single_worst']})" + ("" if num["single_error"] <= TOLERANCE else
                                               "  <- wrong: XLA's CPU compiler, not the plan"))
            print(f"  time at the small size: sharded step {num['step_s']:.3f} s "
                  f"(first call, with compilation: {num['first_step_s']:.1f} s)")
            failures += not num["ok"]
            comm = communication(graph, g, mp, mesh, args.procs, strategy, args.quick, per_node)
            kinds = ", ".join(f"{n} {k}" for k, n in sorted(comm["kinds"].items()))
            measured = sum(comm["measured"].values())
            if args.quick:  # the cost model speaks of the full size only
                inside = sum(i for i, _ in comm["locality"].values())
                across = sum(a for _, a in comm["locality"].values())
                print(f"communication at the small size (compiled in {comm['compile_s']:.1f} s): "
                      f"{fmt(measured)} elements per device ({kinds}); {fmt(inside)} inside a node and "
                      f"{fmt(across)} between nodes of {per_node}")
                continue
            print(f"communication per device, in tensor elements (compiled at the full size in "
                  f"{comm['compile_s']:.1f} s; {kinds}):")
            print(comm_table(comm, args.markdown))
            print(f"by locality, with {per_node} devices per node (devices 0..{per_node - 1} form node 0); elements "
                  "per device moved inside a node and between nodes:")
            print(locality_table(comm, args.markdown))
            totals[label] = (_total(comm["predicted"]), measured)
        if len(totals) >= 2 and not args.quick:
            (a, (pa, ma)), (b, (pb, mb)) = list(totals.items())[:2]
            agree = (pa < pb) == (ma < mb)
            print(f"\n{graph}: predicted {a} {fmt(pa)} vs {b} {fmt(pb)} elements per device; measured "
                  f"{fmt(ma)} vs {fmt(mb)}: the ordering {'agrees' if agree else 'DISAGREES'}")
            failures += not agree
    print(f"\nwhole validation: {time.perf_counter() - t_all:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
