"""Training options checked against the published figures: ZeRO's model
states per device (Rajbhandari et al. 2020), Korthikanti et al. 2022's
activations of one transformer layer term by term, published training
settings that must fit, the plain-FSDP baseline, and the neutral setting."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT, reference, rel, run_cli

LLAMA8B = ROOT / "tests" / "data" / "configs" / "llama3-8b"
GPT2 = ROOT / "tests" / "data" / "configs" / "gpt2" / "config.json"


def _plan(tmp_path, *args) -> dict:
    out = tmp_path / "plan.json"
    run_cli(*args, "--output", out)
    return json.loads(out.read_text())


# -- ZeRO: 2 + 2 + 12 bytes per parameter, sharded stage by stage ---------------------------------

@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_model_states_per_device(tmp_path, stage):
    """Mixed-precision Adam with Psi parameters on N data-parallel devices:
    16 Psi, 4 Psi + 12 Psi / N, 2 Psi + 14 Psi / N, 16 Psi / N, exactly."""
    rec = _plan(tmp_path, "-g", LLAMA8B, "-p", 64, "-b", 64, "--seq", 256, "--precision", "bf16",
                "--plan", f"dp=64,zero={stage}")
    psi, n = rec["parameters"], 64
    assert psi == 8_030_261_248
    mem = rec["memory"]
    states = mem["weights"] + mem["gradients"] + mem["optimizer_state"]
    want = {0: 16 * psi, 1: 4 * psi + 12 * psi / n, 2: 2 * psi + 14 * psi / n, 3: 16 * psi / n}[stage]
    assert rel(states, want) < 1e-12
    assert all(layer.get("options", {}).get("zero", 0) == stage for layer in rec["layers"] if layer["weights"])


def test_zero_communication_volume(tmp_path):
    """Stages 1 and 2 move what the all-reduce moves; stage 3 half as much
    again (on a real device: the paper's model counts a normalisation's
    gradient all-reduce once per statistic, not once per weight)."""
    moved = {}
    for stage in (0, 1, 2, 3):
        rec = _plan(tmp_path, "-g", LLAMA8B, "-p", 64, "-b", 64, "--seq", 256, "--device", "h100",
                    "--plan", f"dp=64,zero={stage}")
        moved[stage] = rec["comm_bytes_per_device"]
    assert moved[1] == moved[0] == moved[2]
    assert rel(moved[3], 1.5 * moved[0]) < 1e-9


# -- Korthikanti et al. 2022: the activations of one layer ----------------------------------------

S, B, H, A = 2048, 4, 6144, 64  # their 22B model's layer, at a micro-batch of 4
SBH = S * B * H
AS = 5 * A * S / H  # the attention's 5 a s / h


def _layer_bytes(tmp_path, p, spec) -> tuple[float, dict]:
    """Bytes one device keeps for layer 1 of a two-layer GPT-2-family model
    of the 22B's width, and the memory record."""
    cfg = json.loads(GPT2.read_text())
    cfg.update(n_embd=H, n_head=A, n_layer=2, n_positions=S, vocab_size=51200)
    model = tmp_path / "gpt22b"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(cfg))
    rec = _plan(tmp_path, "-g", model, "-p", p, "-b", B, "--seq", S, "--precision", "bf16",
                "--attention", "materialized", "--plan", spec)
    # a layer's activations are elements of the training precision (2 bytes; a dropout mask is half of one)
    kept = sum(2 * layer["activations"] for layer in rec["layers"] if layer["name"].startswith("layer1/"))
    return kept, rec["memory"]


GELU = 8  # our feed-forward GEMM applies GeLU to its output: its input (8 s b h bytes) is not kept


# Without a framework the model keeps its own ways (tests/test_frameworks.py checks --framework megatron, where
# every setting holds exactly): the feed-forward product applies GeLU to its output and keeps only its input, and
# a column-parallel product keeps its gathered input.
@pytest.mark.parametrize("p, spec, published, ours", [
    # no parallelism: s b h (34 + 5 a s / h)
    (1, "dp=1", 34 + AS, 34 + AS - GELU),
    # tensor parallel, t = 8: s b h (10 + 24 / t + 5 a s / (h t))
    (8, "tp=8,dp=1", 10 + 24 / 8 + AS / 8, 10 + 24 / 8 + AS / 8 - GELU / 8),
    # tensor + sequence parallel: s b h (34 + 5 a s / h) / t; our column-parallel GEMMs keep their
    # gathered input (2 x 2 s b h), where Megatron-LM keeps its shard and gathers it again
    (8, "tp=8,sp=1,dp=1", (34 + AS) / 8, (34 + AS) / 8 - GELU / 8 + 4 * (1 - 1 / 8)),
    # tensor parallel + selective recomputation: s b h (10 + 24 / t)
    (8, "tp=8,dp=1,recompute=selective", 10 + 24 / 8, 10 + 24 / 8 - GELU / 8),
    # tensor + sequence parallel + selective: 34 s b h / t
    (8, "tp=8,sp=1,dp=1,recompute=selective", 34 / 8, 34 / 8 - GELU / 8 + 4 * (1 - 1 / 8)),
    # full recomputation: 2 s b h (the layer's input only); with sequence parallelism its shard
    (1, "dp=1,recompute=full", 2, 2),
    (8, "tp=8,sp=1,dp=1,recompute=full", 2 / 8, 2 / 8),
])
def test_korthikanti_activations_term_by_term(tmp_path, p, spec, published, ours):
    kept, _ = _layer_bytes(tmp_path, p, spec)
    assert rel(kept, ours * SBH) < 1e-12, (kept / SBH, ours, published)


def test_full_recomputation_peak_holds_one_block_while_it_runs(tmp_path):
    """The peak counts the block recomputed in the backward pass: its
    activations, less the input already kept."""
    none, _ = _layer_bytes(tmp_path, 1, "dp=1")
    kept, mem = _layer_bytes(tmp_path, 1, "dp=1,recompute=full")
    assert rel(mem["transient"], none - kept) < 1e-12
    assert rel(mem["total"], mem["weights"] + mem["gradients"] + mem["optimizer_state"] + mem["activations"]
               + mem["transient"]) < 1e-12


MIXTRAL = ROOT / "tests" / "data" / "configs" / "mixtral-8x7b"


def _layers(names, *args):
    """The layers ``names`` of a plan of ``args``."""
    from cli.args import parse_args
    from planner import plan

    r = plan(parse_args([str(a) for a in args])).result
    return tuple(next(x for x in r.layers if x.name == name) for name in names)


def _expert_layers(*args):
    """The dispatch and combine of a Mixtral block, planned with ``args``."""
    return _layers(("layer3/mlp/dispatch", "layer3/mlp/combine"), "-g", MIXTRAL, "-p", 8, "-b", 8, "--seq", 1024,
                   *args)


@pytest.mark.parametrize("device", [(), ("--device", "h100"), ("--device", "h100", "--framework", "megatron")])
def test_full_recomputation_sends_the_all_to_alls_again(device):
    """A recomputed forward pass dispatches and combines its tokens again:
    each all-to-all (forward, and its gradient backward) is sent a third
    time, on the paper's model as on a device, as it reduces a
    tensor-parallel product's partial sums again."""
    none = _expert_layers(*device, "--plan", "dp=8,ep=8,recompute=none")
    full = _expert_layers(*device, "--plan", "dp=8,ep=8,recompute=full")
    for a, b in zip(none, full):
        assert rel(b.communication, 1.5 * a.communication) < 1e-12 and b.compute > a.compute


def test_op_level_selection_saves_the_all_to_alls_results():
    """torchtitan's op-level selective checkpointing saves what
    all_to_all_single returns (its _op_sac_save_list, "to avoid
    re-communication"): the dispatch and combine run their local work again
    but send nothing again, and keep the tokens the experts receive and the
    results they send back (k copies of each token, two bytes each)."""
    args = ("--device", "h100", "--framework", "torchtitan", "--plan")
    none = _expert_layers(*args, "dp=8,ep=8,zero=3,recompute=none")
    selective = _expert_layers(*args, "dp=8,ep=8,zero=3,recompute=selective")
    full = _expert_layers(*args, "dp=8,ep=8,zero=3,recompute=full")
    received = 2 * 1024 * 4096 * 2  # a device's 1,024 tokens, each to its 2 experts, 4,096 wide in bf16
    for a, s, f in zip(none, selective, full):
        assert s.communication == a.communication and rel(f.communication, 1.5 * a.communication) < 1e-12
        assert s.compute > a.compute
        assert s.memory[3] == received and f.memory[3] == 0.0


def _row_parallel(*args):
    """The attention's output product of a Llama 3 8B block on 8 H100s at
    TP 2, planned with ``args``."""
    return _layers(("layer3/attn/out",), "-g", LLAMA8B, "-p", 8, "-b", 8, "--seq", 2048, "--device", "h100",
                   *args)[0]


def test_op_level_selection_saves_the_reduce_scatters_result():
    """torchtitan's op-level selective checkpointing saves what
    reduce_scatter_tensor returns too, but no other collective: under
    sequence parallelism the all-gathers run again and the reduce-scatters
    do not, half the all-reduces of partial sums the model counts; without
    sequence parallelism (all-reduces, not on the list) all of them, as
    full recomputation does, whatever share of the products' results is
    saved; Megatron-LM's selective recomputation of the attention core
    replays no product."""
    def comm(framework, sp, recompute):
        plan = f"dp=4,tp=2,sp={sp},recompute={recompute}"
        return _row_parallel("--framework", framework, "--plan", plan).communication

    def replayed(sp):  # the share of a full replay's partial sums that op-level selection sends again
        none = comm("torchtitan", sp, "none")
        return (comm("torchtitan", sp, "selective") - none) / (comm("torchtitan", sp, "full") - none)

    assert rel(replayed(0), 1.0) < 1e-9 and rel(replayed(1), 0.5) < 1e-9
    assert comm("megatron", 1, "selective") == comm("megatron", 1, "none")


# -- published training settings fit, with the certificate -----------------------------------------

def _llama70b(tmp_path):
    cfg = json.loads((LLAMA8B / "config.json").read_text())
    cfg.update(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
               num_key_value_heads=8)
    d = tmp_path / "llama3-70b"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return d


@pytest.mark.parametrize("row", ["8b-8xh100", "8b-64x40gb", "70b-256xh100"])
def test_published_settings_fit_with_a_certificate(tmp_path, row):
    """The settings of real runs that a replicated, materialising,
    keep-everything plan cannot fit: searched with recomputation and ZeRO."""
    model, p, dev, b, s = {
        "8b-8xh100": (LLAMA8B, 8, "h100", 8, 8192),
        "8b-64x40gb": (LLAMA8B, 64, "a100-40gb", 128, 4096),
        "70b-256xh100": (None, 256, "h100", 256, 4096),
    }[row]
    model = model or _llama70b(tmp_path)
    rec = _plan(tmp_path, "-g", model, "-p", p, "--device", dev, "-b", b, "--seq", s,
                "--recompute", "auto", "--zero", "auto", "--pp", "1")
    if row == "70b-256xh100":
        assert rec["parameters"] == 70_553_706_496  # Llama 3 70B's published count
    mem = rec["memory"]
    # the device's capacity less the headroom
    assert mem["fits"] is True and mem["total"] <= mem["capacity"] < {"h100": 84.9e9, "a100-40gb": 42.3e9}[dev]
    bound = rec["search"]["within_memory"]
    searched = rec["total_cost"] + rec.get("pooled", 0.0)  # the search's own costs: each collective under its operator
    assert bound["lower_bound"] <= searched <= 1.05 * bound["lower_bound"]
    assert any(layer.get("options") for layer in rec["layers"])  # the fit needs the options
    # the graph as it was (attention materialised, every activation kept, nothing sharded) fits nothing:
    # the smallest plans need 329.7, 178.3 and 440.1 GB
    as_built = ("--recompute", "none", "--zero", "0", "--pp", "1")  # what a real device searches, fixed
    proc = run_cli("-g", model, "-p", p, "--device", dev, "-b", b, "--seq", s, "--attention", "materialized",
                   *as_built, ok=False)
    least = {"8b-8xh100": "329.7 GB", "8b-64x40gb": "178.3 GB", "70b-256xh100": "440.1 GB"}[row]
    assert proc.returncode != 0 and "no strategy fits" in proc.stderr and least in proc.stderr
    # fused attention alone: the options' plan is the faster one where a plan fits at all
    plain = run_cli("-g", model, "-p", p, "--device", dev, "-b", b, "--seq", s, *as_built, ok=False)
    if plain.returncode == 0:
        assert rec["total_cost"] < float(plain.stdout.rstrip().splitlines()[-1].split()[-1])


# -- baselines, neutral setting, bad input -----------------------------------------------------------

def test_compare_has_the_plain_fsdp_baseline(tmp_path):
    rec = _plan(tmp_path, "-g", LLAMA8B, "-p", 64, "-b", 64, "--seq", 1024, "--device", "h100", "--compare")
    fsdp, dp = rec["baselines"]["fsdp"], rec["baselines"]["data_parallel"]
    psi = rec["parameters"]
    states = fsdp["memory"]["weights"] + fsdp["memory"]["gradients"] + fsdp["memory"]["optimizer_state"]
    assert rel(states, 16 * psi / 64) < 1e-12
    assert fsdp["memory"]["activations"] == dp["memory"]["activations"]
    assert rec["total_cost"] <= fsdp["total_cost"]


@pytest.mark.parametrize("graph, p", [("transformer", 16), ("alexnet", 8), ("rnnlm", 32)])
def test_options_without_a_capacity_leave_the_reference_optimum(graph, p):
    """Recomputation only adds cost and ZeRO 1/2 cost what the all-reduce
    costs: without a memory bound, auto options find the reference optimum."""
    out = run_cli("-g", graph, "-p", p, "--recompute", "auto", "--zero", "auto").stdout
    total = float(out.rstrip().splitlines()[-1].split()[-1])
    assert rel(total, reference(graph, p)["optimal_cost"]) < 1e-9


@pytest.mark.parametrize("args, message", [
    (("--recompute", "bogus"), "--recompute: invalid choice"),
    (("--zero", "5"), "--zero: invalid choice"),
    (("--attention", "x"), "--attention: invalid choice"),
    (("--plan", "tp=3"), "does not divide the 4 devices"),
    (("--plan", "foo=1"), "unknown key 'foo'"),
    (("--plan", "zero=4"), "zero"),
    (("--plan", "recompute=some"), "recompute"),
])
def test_bad_option_input(args, message):
    proc = run_cli("-g", "alexnet", "-p", 4, *args, ok=False)
    assert proc.returncode == 2 and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
