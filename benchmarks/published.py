"""Every published figure the model is checked against, beside the
prediction and the error: one table, fitted rows marked.

    python benchmarks/published.py [--markdown]
        [--only megatron,korthikanti,bridge,modelzoo,torchtitan,megatron_deepspeed,zero]

Each row is costed as the command line costs it (``--plan`` with the
framework that ran it):

- **Narayanan et al. (SC'21), Table 1** (``megatron``): TFLOP/s per GPU of
  the ten GPT models on A100s, ``--framework megatron``, full recomputation,
  micro-batch 1 (eq. (3)'s FLOP over the predicted step time);
- **Korthikanti et al. (2022), Table 5** (``korthikanti``): step seconds of
  their 22B, 175B, 530B and 1T models with full recomputation, and with
  selective recomputation and sequence parallelism, and the peak memory
  against the A100's 80 GB; their Table 2 (activation bytes of a layer,
  per ``s b h``) for each setting, term by term;
- **Megatron Bridge's performance summaries** (25.11 and 26.02;
  ``bridge``): tokens/s per GPU of its FP8 pre-training runs of Llama 3
  8B and 70B and Llama 3.1 405B on DGX H100 and of Llama 3 8B and Llama
  3.1 405B on DGX B200, GB200 and GB300, and of its mixture-of-experts
  runs on each of them that ``--plan`` can state (Qwen3-30B-A3B, GPT-OSS 120B,
  Qwen3-235B-A22B; MXFP8 costed as FP8), with
  ``--framework megatron`` (the tensor-parallel collectives overlapped
  where the recipes overlap them), and each run's peak against the
  device it fitted on;
- **the Megatron-MoE Model Zoo** (``modelzoo``): step seconds of
  Qwen3-235B-A22B on 256 H100s under Megatron-LM with parallel folding
  (``etp=1``: expert parallelism 8 or 32 over the tensor- and
  data-parallel devices), ``--framework megatron``, and each run's peak
  against the 80 GB it ran in;
- **torchtitan's December 2024 benchmark** (``torchtitan``): tokens/s per
  GPU and the allocator's peak (GiB) of Llama 3.1 8B, 70B and 405B on
  H100 96 GB (``--device h100-96gb --framework torchtitan@2024-12``: its
  code of then, the loss eager under torch.compile, FlashAttention-2; the
  rows that ran asynchronous tensor parallelism with ``--tp-overlap``), and
  its June 2025 runs of Llama 3.1 8B on 32 and 64 H200s (``--device h200
  --framework torchtitan@2025-06``: FSDP, torch.compile of the blocks and
  the loss, Float8 with its all-gathers in FP8, FlashAttention-2), its
  June 2025 comparison of vanilla and asynchronous tensor parallelism
  (70B on 256 and 8B on 64 H100 96 GB, bf16 and Float8 tensorwise,
  ``torchtitan@2025-06``; tokens/s only) and its spring 2024 runs of
  Llama 3 8B and 70B and Llama 2 13B and 70B on 64 A100s (FSDP, eager;
  ``--device a100-80gb --framework torchtitan@2024-12``, the nearest
  version profiled; tokens/s only);
- **Megatron-DeepSpeed's published runs** (``megatron_deepspeed``):
  step seconds of Megatron-Turing NLG 530B on 2,240, 2,800 and 3,360
  A100s (Smith et al. 2022) and BLOOM 176B's "about 150" TFLOP/s per GPU
  on 384 A100s (BigScience 2022), ``--framework deepspeed``: DeepSpeed's
  pipeline engine and optimizer under Megatron-LM's layers;
- **ZeRO (Rajbhandari et al., SC'20), Figure 1** and **DeepSpeed's
  estimators** (``zero``): model states per device, without a framework and
  with ``--framework deepspeed``.

Rows marked "regressed" are figures their authors track as a regression
of their own software (Megatron Bridge's issue #1998: its dropless
Qwen3-30B-A3B runs of 25.11 on H100s and B200s, 26.02's B200 run of the
same configuration, and 26.02's H100 run, which 26.02.01 ran 77% faster):
shown, not counted among the held-out figures (each table's
``regressed``).

The constants fitted on published rows, on the rows marked "fitted":
the torchtitan profiles' ``overhead`` (time) and ``reserve`` (memory) on
December 2024's FSDP + torch.compile on 8 GPUs, and Ampere's
``overhead`` on spring 2024's Llama 3 8B on 64 A100s (selective op); the
Megatron profile's Blackwell ``overhead`` on Megatron Bridge 25.11's
Llama 3 8B on 8 B200s, and its ``moe_host_ms`` (the host's time a dropless
expert layer waits on) on the Model Zoo's Qwen3-235B-A22B at TP 4 x PP 8 x
EP 8.  Every other row is held out.  Megatron Bridge's
and the Model Zoo's runs are costed with the settings their recipes ran
with (each table's ``flags``: Bridge's bf16 gradients, both sources'
overlapped gradient reductions, the Model Zoo's DeepEP dispatch).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the published tables as the tests read them

from cli.args import parse_args  # noqa: E402
from megatron_table import ROWS as SC21, config, eq3, eq3_flop  # noqa: E402
from planner import plan  # noqa: E402
from table import render  # noqa: E402

DATA = ROOT / "tests" / "data" / "published"
LLAMA8B = ROOT / "tests" / "data" / "configs" / "llama3-8b" / "config.json"
GPT2 = ROOT / "tests" / "data" / "configs" / "gpt2" / "config.json"
GROUPS = ("megatron", "korthikanti", "bridge", "modelzoo", "torchtitan", "megatron_deepspeed", "zero")


def run(*argv):
    return plan(parse_args([str(a) for a in argv])).result


def gpt(where: Path, name: str, heads: int, hidden: int, layers: int, seq: int, vocab: int) -> Path:
    d = where / name
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_head": heads, "n_embd": hidden,
                                               "n_layer": layers, "n_positions": seq, "vocab_size": vocab}))
    return d / "config.json"


def row(source, label, figure, published, predicted, fmt="{:,.1f}", fitted=False, bound=False, regressed=False):
    """A table row; ``bound``: the published figure is a limit (a device's
    memory) that the prediction must stay within, not a measurement;
    ``regressed``: a figure its authors track as a regression of their
    software (shown, not counted)."""
    err = predicted / published - 1.0 if published else (0.0 if predicted == published else math.inf)
    return {"source": source, "row": label, "figure": figure, "published": fmt.format(published),
            "predicted": fmt.format(predicted), "error": err, "fitted": fitted, "bound": bound,
            "regressed": regressed}


#: Korthikanti et al.'s Table 2, bytes of a layer's activations per s b h, by --plan setting
TABLE2 = {
    "dp=1": lambda a, s, h, t: 34 + 5 * a * s / h,
    "tp=8,dp=1": lambda a, s, h, t: 10 + 24 / t + 5 * a * s / (h * t),
    "tp=8,sp=1,dp=1": lambda a, s, h, t: (34 + 5 * a * s / h) / t,
    "tp=8,dp=1,recompute=selective": lambda a, s, h, t: 10 + 24 / t,
    "tp=8,sp=1,dp=1,recompute=selective": lambda a, s, h, t: 34 / t,
    "dp=1,recompute=full": lambda a, s, h, t: 2.0,
    "tp=8,sp=1,dp=1,recompute=full": lambda a, s, h, t: 2.0 / t,
}


def megatron(tmp: Path):
    for r in SC21:
        cfg = config(tmp, r)
        res = run("-g", cfg, "-p", r["gpus"], "-b", r["batch"], "--device", "a100-80gb", "--attention",
                  "materialized", "--framework", "megatron", "--plan",
                  f"tp={r['tp']},pp={r['pp']},recompute=full,microbatch=1")
        tf = eq3(r) / res.step_seconds / r["gpus"] / 1e12
        yield row("Megatron-LM SC'21 T1", f"{r['params_b']}B, {r['gpus']} GPUs", "TFLOP/s per GPU",
                  r["tflops_per_gpu"], tf)


def korthikanti(tmp: Path):
    data = json.loads((DATA / "korthikanti2022.json").read_text())
    rows = [dict(zip(data["columns"], r)) for r in data["rows"]]
    for r in rows:
        cfg = gpt(tmp, f"k{r['model']}", r["heads"], r["hidden"], r["layers"], data["seq"], data["vocab"])
        sched = f",schedule=interleaved:{r['chunks']}" if r["chunks"] > 1 else ""
        for mode, spec, pub in (("full", "recompute=full", r["full_s"]),
                                ("selective + SP", "sp=1,recompute=selective", r["selective_sp_s"])):
            res = run("-g", cfg, "-p", r["gpus"], "-b", r["batch"], "--seq", data["seq"], "--device", "a100-80gb",
                      "--attention", "materialized", "--framework", "megatron", "--plan",
                      f"tp={r['tp']},pp={r['pp']},microbatch={r['microbatch']},{spec}{sched}")
            yield row("Korthikanti T5", f"{r['model']} {mode}", "step s", pub, res.step_seconds, "{:.2f}")
            if r["model"] == "1T" and mode != "full":  # what they ran fits the A100's 80 GB
                peak = res.memory_bytes + sum(res.beyond_tensors)
                yield row("Korthikanti T5", "1T selective + SP", "peak GB (80 GB)", 80.0, peak / 1e9, "{:.1f}",
                          bound=True)
    s, b, h, a = data["seq"], 4, 6144, 64  # their 22B model's layer at a micro-batch of 4
    cfg = gpt(tmp, "k22-layer", a, h, 2, s, data["vocab"])
    for label, spec, formula in data["activations"]["settings"]:
        p = 8 if "tp=8" in spec else 1
        res = run("-g", cfg, "-p", p, "-b", b, "--seq", s, "--precision", "bf16", "--attention", "materialized",
                  "--framework", "megatron", "--plan", spec)
        kept = sum(layer.memory[3] for layer in res.layers if layer.name.startswith("layer1/"))
        want = TABLE2[spec](a, s, h, 8)
        yield row("Korthikanti T2", f"{label}: {formula}", "bytes / sbh", want, kept / (s * b * h), "{:.4f}")


#: torchtitan's published runs: (file, the table's source, the device they ran on, the profile of their version)
TORCHTITAN = (("torchtitan_h100_202412.json", "torchtitan 2024-12", "h100-96gb", "torchtitan@2024-12"),
              ("torchtitan_h200_202506.json", "torchtitan 2025-06 H200", "h200", "torchtitan@2025-06"),
              ("torchtitan_asynctp_h100_202506.json", "torchtitan 2025-06 AsyncTP", "h100-96gb", "torchtitan@2025-06"),
              ("torchtitan_a100_2024.json", "torchtitan 2024 A100", "a100-80gb", "torchtitan@2024-12"))


def torchtitan(tmp: Path):
    for name, source, device, framework in TORCHTITAN:
        yield from torchtitan_runs(tmp, json.loads((DATA / name).read_text()), source, device, framework)


def _model_name(key: str) -> str:
    """A published table's model key as its rows name it: ``8b`` is 8B,
    ``llama2-13b`` Llama 2 13B."""
    family, _, size = key.rpartition("-")
    return f"Llama {family[5:]} {size.upper()}" if family.startswith("llama") else size.upper()


def torchtitan_runs(tmp: Path, data: dict, source: str, device: str, framework: str):
    base = json.loads(LLAMA8B.read_text())
    paths = {}
    for name, changes in data["models"].items():
        d = tmp / f"llama-{name}"
        d.mkdir(exist_ok=True)
        (d / "config.json").write_text(json.dumps({**base, **changes, "max_position_embeddings": 262144}))
        paths[name] = d
    from frameworks import FRAMEWORKS

    fitted = FRAMEWORKS[framework].fitted
    for values in data["rows"]:
        r = dict(zip(data["columns"], values))
        flags = (["--compile"] * r["compile"] + ["--float8"] * r["float8"]
                 + ["--tp-overlap"] * r.get("tp_overlap", False))
        res = run("-g", paths[r["model"]], "-p", r["gpus"], "-b", r["batch"], "--seq", r["seq"], "--device",
                  device, "--framework", framework, "--plan", r["plan"], *flags)
        label = f"{_model_name(r['model'])}, {r['gpus']} GPUs, {r['label']}"
        fit = f"{source}: {label}" in fitted
        tps = r["batch"] * r["seq"] / res.step_seconds / r["gpus"]
        yield row(source, label, "tokens/s per GPU", r["tokens_per_s"], tps, "{:,.0f}", fit)
        if r["memory_gib"] is not None:
            yield row(source, label, "memory GiB", r["memory_gib"], res.reserved_bytes / 2**30, "{:.1f}", fit)


def bridge(tmp: Path):
    """Megatron Bridge's performance summary: tokens/s per GPU, and the
    peak (tensors and what the process holds beyond them) within the
    device each run fitted on."""
    data = json.loads((DATA / "megatron_bridge.json").read_text())
    for values in data["rows"]:
        r = dict(zip(data["columns"], values))
        flags = ["--float8"] * r["float8"] + ["--tp-overlap"] * r["tp_overlap"]
        yield from _megatron_run(tmp, data, r, "Megatron Bridge", r["label"], r["tokens_per_s"], flags)


def modelzoo(tmp: Path):
    """The Megatron-MoE Model Zoo's Qwen3-235B-A22B runs: tokens/s per GPU
    from their step seconds, and the peak within the device."""
    data = json.loads((DATA / "megatron_moe_modelzoo.json").read_text())
    for values in data["rows"]:
        r = dict(zip(data["columns"], values))
        label = f"{data['models'][r['model']]['name']}, {r['gpus']} GPUs, {r['label']}"
        yield from _megatron_run(tmp, data, r, "Megatron-MoE Model Zoo", label,
                                 r["batch"] * r["seq"] / r["gpus"] / r["step_seconds"])


def _megatron_run(tmp: Path, data: dict, r: dict, source: str, label: str, tokens_per_s: float, flags=()):
    """A published Megatron-LM run ``r`` of the table ``data``, costed under
    ``--framework megatron``: its tokens/s per GPU against the published
    ``tokens_per_s``, and its peak within the device it ran on; with the
    table's ``flags`` (the settings its recipes ran with: ``flags_why``)
    and the row's (``row_flags``)."""
    from frameworks import known

    res = run("-g", bridge_model(tmp, data, r["model"]), "-p", r["gpus"], "-b", r["batch"], "--seq", r["seq"],
              "--device", r["device"], "--framework", "megatron", "--plan", r["plan"], *flags, *data.get("flags", ()),
              *data.get("row_flags", {}).get(r["label"], ()))
    yield row(source, label, "tokens/s per GPU", tokens_per_s, r["batch"] * r["seq"] / res.step_seconds / r["gpus"],
              "{:,.0f}", f"{source}: {label}" in known("megatron").fitted, regressed=label in data.get("regressed", {}))
    cap = res.cost_model.cluster.device_memory
    yield row(source, label, f"peak GB ({cap:g} GB)", cap, (res.memory_bytes + sum(res.beyond_tensors)) / 1e9,
              "{:.1f}", bound=True)


def bridge_model(tmp: Path, data: dict, key: str) -> Path:
    """The config a Megatron Bridge row names: one of tests/data/configs, or
    a family's released config with the published model's changes."""
    spec = data.get("models", {}).get(key)
    if spec is None:
        return ROOT / "tests" / "data" / "configs" / key
    cfg = json.loads((ROOT / "tests" / "data" / spec["base"] / "config.json").read_text())
    d = tmp / key
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps({**cfg, **spec["changes"]}))
    return d


def megatron_deepspeed(tmp: Path):
    """Megatron-DeepSpeed's published runs (MT-NLG 530B, BLOOM 176B) under
    ``--framework deepspeed``: its pipeline engine, optimizer and gradient
    reduction; step seconds, or TFLOP/s per GPU by eq. (3) where that is
    what was published."""
    data = json.loads((DATA / "megatron_deepspeed.json").read_text())
    for values in data["rows"]:
        r = dict(zip(data["columns"], values))
        spec = data["runs"][r["run"]]
        m = spec["model"]
        cfg = gpt(tmp, r["run"], m["n_head"], m["n_embd"], m["n_layer"], m["n_positions"], m["vocab_size"])
        res = run("-g", cfg, "-p", r["gpus"], "-b", r["batch"], "--device", spec["device"], "--attention",
                  "materialized", "--framework", "deepspeed", *spec["flags"], "--plan", spec["plan"])
        label = f"{spec['name']}, {r['gpus']} GPUs"
        if spec["figure"] == "step seconds":
            yield row("Megatron-DeepSpeed", label, "step s", r["published"], res.step_seconds, "{:.1f}")
        else:
            flop = eq3_flop(r["batch"], m["n_positions"], m["n_layer"], m["n_embd"], m["vocab_size"])
            yield row("Megatron-DeepSpeed", label, spec["figure"], r["published"],
                      flop / res.step_seconds / r["gpus"] / 1e12, "{:.0f}")


def zero(tmp: Path):
    # ZeRO's Figure 1: 7.5B parameters on 64 devices, K = 12: the model's bytes per parameter times 7.5B
    psi, n = 7.5e9, 64
    for stage, pub in ((0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)):
        res = run("-g", LLAMA8B, "-p", n, "-b", n, "--seq", 256, "--precision", "bf16", "--plan",
                  f"dp={n},zero={stage}")
        per = sum(res.memory[:3]) / res.parameters
        yield row("ZeRO SC'20 Fig. 1", f"7.5B, 64 GPUs, stage {stage} (figure rounded)", "GB per device", pub,
                  per * psi / 1e9, "{:.2f}")
    # DeepSpeed 0.19's estimators (deepspeed/runtime/zero/stage_1_and_2.py and stage3.py, no offload):
    # ZeRO-2 2P + 18P/N, ZeRO-3 4 x largest layer + 18P/N; Llama 3 8B's largest layer is its 128,256 x 4,096
    # embedding (and output) matrix
    largest = 128256 * 4096
    for n in (8, 64):
        for stage in (2, 3):
            res = run("-g", LLAMA8B, "-p", n, "-b", n, "--seq", 256, "--precision", "bf16", "--framework",
                      "deepspeed", "--plan", f"dp={n},zero={stage}")
            p = res.parameters
            want = 2 * p + 18 * p / n if stage == 2 else 4 * largest + 18 * p / n
            got = sum(res.memory[:3]) + (res.transient if stage == 3 else 0.0)
            yield row("DeepSpeed estimator", f"Llama 3 8B, {n} GPUs, ZeRO-{stage}", "GB per device", want / 1e9,
                      got / 1e9, "{:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--only", help=f"comma-separated groups: {', '.join(GROUPS)} (default: all)")
    args = ap.parse_args()
    groups = args.only.split(",") if args.only else list(GROUPS)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in groups:
            for r in globals()[name](Path(tmp)):
                out.append(r)
                print(f"{r['source']}: {r['row']}: {r['predicted']} against {r['published']}", file=sys.stderr,
                      flush=True)
    head = ["source", "row", "figure", "published", "predicted", "error", ""]
    cells = [[r["source"], r["row"], r["figure"], r["published"], r["predicted"],
              ("fits" if r["error"] <= 0 else "over") if r["bound"] else f"{100 * r['error']:+.1f}%",
              "fitted" if r["fitted"] else "regressed" if r["regressed"] else ""] for r in out]
    print(render(head, cells, args.markdown, left=3))
    print()
    for source in dict.fromkeys(r["source"] for r in out):
        mine = [r for r in out if r["source"] == source and not r["fitted"] and not r["bound"]]
        errs = [abs(r["error"]) for r in mine if not r["regressed"]]
        regressed = sum(r["regressed"] for r in mine)
        print(f"{source}: {len(errs)} held-out figures, mean |error| {100 * sum(errs) / len(errs):.1f}%, "
              f"largest {100 * max(errs):.1f}%" + (f"; {regressed} regressed figures shown, not counted"
                                                   if regressed else ""))


if __name__ == "__main__":
    main()
