"""Run one exported plan for a training step on GPUs and print the measured
time beside the predicted one.

    python scheduler.py -g config.json -p 8 --device h100 --precision bf16 --plan tp=8 --export jax:plan.json
    python benchmarks/gpu_step.py plan.json

The plan is a ``--export jax`` file: its model is built from the graph the
file names, at the sizes it was written for (``jax/graph_model.py``), its
parameters and data sharded as the file says on a mesh of the machine's
first ``p`` GPUs (``exports/jax_loader.py``), and one training step (loss,
gradients, an SGD update of every weight) is compiled, run ``--warmup``
times, then timed over ``--steps`` runs: the median is printed beside the
cost model's prediction, which the file records (meaningful when the plan
was costed for this GPU: ``--device``).  Where jax, a GPU, or as many GPUs
as the plan's devices are missing, it says so and exits 0: there is
nothing to measure.  A file it cannot read stops it with one line and
exit status 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "jax"))

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "fp64": "float32"}


def _say(line: str) -> None:
    print(f"gpu_step.py: {line}")


def _fail(line: str):
    """One line on stderr, exit status 2."""
    print(f"gpu_step.py: error: {line}", file=sys.stderr)
    raise SystemExit(2)


def _read(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        _fail(f"{path}: {getattr(e, 'strerror', None) or e}")
    if not isinstance(doc, dict) or doc.get("format") != "pase-jax-shardings" or "graph" not in doc:
        _fail(f"{path} is not a plan written by scheduler.py --export jax")
    return doc


def gpus():
    """The machine's GPUs as jax sees them ([] without any)."""
    import jax

    try:
        return jax.devices("gpu")
    except RuntimeError:
        return []


def measure(path: str, doc: dict, devices, steps: int, warmup: int) -> dict:
    """Compile and time one training step of the plan in ``path`` on ``devices``."""
    import jax
    import jax.numpy as jnp
    import jax_models as jm
    from graph_model import GraphModel
    from jax.sharding import NamedSharding

    from exports.jax_loader import load
    from models import build_graph

    mp = load(path)
    if len(mp.stages) > 1:
        _fail("a pipelined plan is one program per stage; run a plan without --pp")
    g = build_graph(doc["graph"], **doc["params"])
    gm = GraphModel(g)
    mesh = mp.mesh(devices)
    dtype = getattr(jnp, DTYPES.get(doc.get("precision"), "float32"))
    params = jax.tree.map(lambda a: a.astype(dtype), gm.params(jax.random.PRNGKey(0)))
    data = [a.astype(dtype) if a.dtype == jnp.float32 else a for a in gm.data(jax.random.PRNGKey(1))]
    p_sh = {gm.key(v, i): mp.sharding(mesh, gm.ops[v].name, "inputs", i) for v, i in gm.weights}
    d_sh = [mp.sharding(mesh, gm.ops[v].name, "inputs", i) for v, i in gm.data_inputs]
    d_sh.append(NamedSharding(mesh, mp.spec(mp.layers[gm.ops[gm.loss_node].name].inputs[0][:-1])))
    params = jax.device_put(params, p_sh)
    data = [jax.device_put(a, s) for a, s in zip(data, d_sh)]
    ctx = jm.Ctx(mp, mesh)

    def step(prm, *batch):
        loss, grads = jax.value_and_grad(lambda q: gm.loss(q, *batch, ctx=ctx))(prm)
        return loss, jax.tree.map(lambda w, dw: w - 1e-3 * dw.astype(w.dtype), prm, grads)

    fn = jax.jit(step, in_shardings=(p_sh, *d_sh), out_shardings=(None, p_sh), donate_argnums=0)
    t0 = time.perf_counter()
    compiled = fn.lower(params, *data).compile()
    compile_s = time.perf_counter() - t0
    for _ in range(warmup):
        loss, params = compiled(params, *data)
    jax.block_until_ready(params)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        loss, params = compiled(params, *data)
        jax.block_until_ready((loss, params))
        times.append(time.perf_counter() - t0)
    return {"compile_s": compile_s, "median_s": statistics.median(times), "min_s": min(times),
            "loss": float(loss), "steps": steps}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plan", help="a plan written by scheduler.py --export jax:FILE")
    ap.add_argument("--steps", type=int, default=10, help="timed steps (default: 10)")
    ap.add_argument("--warmup", type=int, default=3, help="steps run before timing (default: 3)")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        _fail("--steps must be at least 1 and --warmup at least 0")
    doc = _read(args.plan)
    procs = int(doc.get("procs", 1))
    if importlib.util.find_spec("jax") is None:
        _say("jax is not installed (pip install -r benchmarks/jax/requirements.txt, with a CUDA build of jaxlib "
             "for GPUs); nothing to measure")
        return 0
    devices = gpus()
    if not devices:
        import jax

        _say(f"no GPU: jax {jax.__version__} sees only {', '.join(sorted({d.platform for d in jax.devices()}))} "
             f"devices; nothing to measure (the plan asks for {procs} GPUs)")
        return 0
    if len(devices) < procs:
        _say(f"the plan runs on {procs} devices; this machine has {len(devices)} GPUs: nothing to measure")
        return 0
    got = measure(args.plan, doc, devices[:procs], args.steps, args.warmup)
    predicted = doc.get("predicted_step_seconds")
    print(f"{doc.get('model')} on {procs} x {devices[0].device_kind}: {doc.get('plan', '')}")
    print(f"measured: {got['median_s'] * 1e3:.3f} ms per step (median of {got['steps']}, fastest "
          f"{got['min_s'] * 1e3:.3f} ms; compiled in {got['compile_s']:.1f} s; loss {got['loss']:.4g})")
    if predicted is not None:
        costed = doc.get("device") or "the paper's machine (10 TFLOPS, 16 GB/s: give --device to cost it for a GPU)"
        print(f"predicted: {predicted * 1e3:.3f} ms per step, costed for {costed} in {doc.get('precision')}; "
              f"measured / predicted = {got['median_s'] / predicted:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
