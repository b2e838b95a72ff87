"""The ``megatron`` exports, taken by Megatron Core itself: the bash array,
as bash reads it, becomes Megatron Core's ``TransformerConfig`` and
``DistributedDataParallelConfig`` as Megatron-LM's
``core_transformer_config_from_args`` builds them (every dataclass field
from the argument of its name: ``--tensor-model-parallel-size`` sets
``tensor_model_parallel_size``, a field's ``argparse_meta`` naming its
flag where the name differs, a named switch of a field on by default or
``--no-X`` clearing it), and the configs' own validation runs: sequence
parallelism with tensor parallelism, the recomputation settings, the
pipeline layout against the number of layers.
The layers each pipeline rank and virtual stage builds are then read from
Megatron Core (its layout, or its even split) and compared with the
plan's.

Megatron-LM's ``megatron/training/arguments.py`` is not in the
``megatron-core`` package: the flags that only it reads (the batch sizes,
the sequence length, the checkpoint format) are listed here and checked
by name; ``--num-layers-per-virtual-pipeline-stage`` becomes the virtual
pipeline's size as its ``validate_args`` computes it.

Needs torch and megatron-core (``requirements-torch.txt``); CI installs
them in a second environment where this file must not skip."""

from __future__ import annotations

import dataclasses
import json
import typing

import pytest

from conftest import ROOT, bash_array, export_text

pytest.importorskip("torch", reason="torch is not installed (pip install -r requirements-torch.txt)")
pytest.importorskip("megatron.core", reason="megatron-core is not installed (pip install -r requirements-torch.txt)")

CONFIGS = ROOT / "tests" / "data" / "configs"
MIXTRAL = str(CONFIGS / "mixtral-8x7b" / "config.json")

#: flags Megatron-LM's own argument parser reads (megatron/training/arguments.py), no Megatron Core field
TRAINING_ONLY = {"micro_batch_size", "global_batch_size", "seq_length", "ckpt_format",
                 "num_layers_per_virtual_pipeline_stage"}


def _gpt(folder, layers: int, heads: int = 16, hidden: int = 1024) -> str:
    folder.mkdir(exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps({"model_type": "gpt2", "n_head": heads, "n_embd": hidden, "n_layer": layers,
                                "n_positions": 2048, "vocab_size": 51200}))
    return str(path)


def _render(graph: str, procs: int, **kw) -> str:
    return export_text("megatron", graph, procs, **kw)


def _words(text: str) -> list[str]:
    return bash_array(text, "PASE_PARALLEL_ARGS")


def _flags(words: list[str]) -> dict:
    """Flag name (dashes as underscores, no leading ``--``) to its value,
    ``True`` for a switch, a list for a flag of several values
    (``--recompute-modules layernorm moe_act``, argparse's ``nargs='*'``)."""
    out, i = {}, 0
    while i < len(words):
        assert words[i].startswith("--"), words[i]
        name, j = words[i][2:].replace("-", "_"), i + 1
        while j < len(words) and not words[j].startswith("--"):
            j += 1
        values = words[i + 1:j]
        out[name], i = (True if not values else values[0] if len(values) == 1 else values), j
    return out


def _fields(cls, flags: dict, used: set) -> dict:
    """The keyword arguments of the dataclass ``cls`` that ``flags`` set,
    each converted to its field's type; the flags taken go into ``used``."""
    hints = typing.get_type_hints(cls)
    kw = {}
    for f in dataclasses.fields(cls):
        meta = f.metadata.get("argparse_meta", {})
        named = [n[2:].replace("-", "_") for n in meta.get("arg_names", [])]
        for name in named or [f.name]:
            if name in flags:
                value = flags[name]
                kind = hints[f.name]
                if value is True and named and f.default is True:  # a named switch of a field on by default clears
                    value = False  # it (--disable-bias-linear: add_bias_linear)
                elif value is not True and (kind is int or typing.Optional[int] == kind):
                    value = int(value)
                elif isinstance(value, str) and "List" in str(kind):  # one value of a list flag
                    value = [value]
                kw[f.name] = value
                used.add(name)
        if f"no_{f.name}" in flags and hints[f.name] is bool:
            kw[f.name] = False
            used.add(f"no_{f.name}")
    return kw


def _megatron(text: str, layers: int, heads: int = 16, hidden: int = 1024, **model):
    """Megatron Core's configs of an exported bash array for a model of
    ``layers`` layers: ``(TransformerConfig, DistributedDataParallelConfig,
    the flags)``."""
    import torch
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.transformer.transformer_config import TransformerConfig

    flags = _flags(_words(text))
    used: set = set()
    kw = _fields(TransformerConfig, flags, used)
    ddp = DistributedDataParallelConfig(**_fields(DistributedDataParallelConfig, flags, used))
    assert set(flags) - used <= TRAINING_ONLY, f"flags Megatron reads nowhere: {set(flags) - used - TRAINING_ONLY}"
    pp = kw.get("pipeline_model_parallel_size", 1)
    if "num_layers_per_virtual_pipeline_stage" in flags:  # validate_args: the stage's layers over the chunk's
        per_stage, per_chunk = layers // pp, int(flags["num_layers_per_virtual_pipeline_stage"])
        assert per_stage % per_chunk == 0
        kw["virtual_pipeline_model_parallel_size"] = per_stage // per_chunk
    if pp > 1:
        kw["pipeline_dtype"] = torch.bfloat16
    cfg = TransformerConfig(num_layers=layers, hidden_size=hidden, num_attention_heads=heads, **model, **kw)
    return cfg, ddp, flags


def _layers_built(cfg) -> list[list[int]]:
    """The decoder layers Megatron Core builds on each pipeline rank, one
    count per virtual stage (model chunk)."""
    from megatron.core import parallel_state
    from megatron.core.transformer.enums import LayerType
    from megatron.core.transformer.transformer_block import get_num_layers_to_build

    pp, vpp = cfg.pipeline_model_parallel_size, cfg.virtual_pipeline_model_parallel_size
    if cfg.pipeline_model_parallel_layout is not None:
        layout = cfg.pipeline_model_parallel_layout.layout
        return [[chunk.count(LayerType.decoder) for chunk in rank] for rank in layout]
    parallel_state.set_virtual_pipeline_model_parallel_world_size(vpp)
    try:
        return [[get_num_layers_to_build(cfg, vp_stage=v, pp_rank=r) for v in range(vpp or 1)] for r in range(pp)]
    finally:
        parallel_state.set_virtual_pipeline_model_parallel_world_size(None)


def test_an_interleaved_pipeline_of_unequal_chunks(tmp_path):
    """30 layers over 4 stages of 2 chunks (7, 8, 8 and 7 layers: the
    embedding and the loss counted as layers, Megatron-LM's way; a stage's
    later chunk takes the extra one): Megatron Core reads the layout's
    eight virtual stages as two chunks per rank, as the plan was costed."""
    gpt = _gpt(tmp_path / "g30", 30)
    text = _render(gpt, 32, batch=64, device="a100-80gb", framework="megatron",
                   plan="tp=2,pp=4,sp=1,recompute=selective,schedule=interleaved:2,microbatch=1,zero=1")
    assert "--pipeline-model-parallel-layout 'Ettt|tttt|tttt|ttt|tttt|tttt|tttt|ttttL'" in text
    cfg, ddp, _ = _megatron(text, 30)
    assert cfg.virtual_pipeline_model_parallel_size == 2
    assert _layers_built(cfg) == [[3, 4], [4, 4], [4, 4], [3, 4]]
    assert (cfg.tensor_model_parallel_size, cfg.sequence_parallel, cfg.recompute_granularity) == (2, True, "selective")
    assert ddp.use_distributed_optimizer is True and cfg.bf16 is True


def test_an_interleaved_pipeline_of_one_layer_chunks(tmp_path):
    """30 layers over 4 stages of 8 chunks: with the embedding and the loss
    counted, chunks of one layer, the first rank's first holding the
    embedding alone and the last rank's last the loss alone; Megatron Core
    reads the exported layout so, as the plan was costed."""
    gpt = _gpt(tmp_path / "g30", 30)
    text = _render(gpt, 32, batch=64, device="a100-80gb", framework="megatron",
                   plan="tp=2,pp=4,sp=1,schedule=interleaved:8,microbatch=1,zero=1")
    assert "--pipeline-model-parallel-layout '" + "|".join(["E"] + ["t"] * 30 + ["L"]) + "'" in text
    cfg, _, _ = _megatron(text, 30)
    assert cfg.virtual_pipeline_model_parallel_size == 8
    assert _layers_built(cfg) == [[0] + [1] * 7, [1] * 8, [1] * 8, [1] * 7 + [0]]


def test_an_uneven_pipeline(tmp_path):
    gpt = _gpt(tmp_path / "g30", 30)
    text = _render(gpt, 16, batch=64, device="a100-80gb", framework="megatron",
                   plan="tp=2,pp=4,sp=1,recompute=full,microbatch=2")
    cfg, ddp, flags = _megatron(text, 30)
    assert cfg.virtual_pipeline_model_parallel_size is None
    assert _layers_built(cfg) == [[7], [8], [8], [7]]
    assert (cfg.recompute_granularity, cfg.recompute_method, cfg.recompute_num_layers) == ("full", "uniform", 1)
    assert ddp.use_distributed_optimizer is False
    assert (flags["micro_batch_size"], flags["global_batch_size"], flags["seq_length"]) == ("2", "64", "2048")


@pytest.mark.parametrize("layers, pp, vpp", [(30, 4, None), (30, 4, 2), (126, 8, None), (126, 8, 8), (94, 8, 4),
                                              (126, 16, 8), (30, 4, 8)])
def test_megatron_core_splits_the_layers_as_the_plan_does(layers, pp, vpp):
    """Megatron Core's own split with the embedding and the loss counted
    as layers (account_for_embedding_in_pipeline_split and
    account_for_loss_in_pipeline_split, as Megatron Bridge's recipes set
    them for layers that do not divide) gives each rank the layers the
    Megatron profile's split puts on each stage; interleaved, the first
    rank's chunks are the plan's too (its short chunk first), and the
    last rank's short chunk is its last where the plan's is its first."""
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    from frameworks import FRAMEWORKS
    from pipeline import chunk_sizes, split_counts, stage_chunk_sizes

    cfg = TransformerConfig(num_layers=layers, hidden_size=1024, num_attention_heads=16,
                            pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=vpp,
                            pipeline_dtype=torch.bfloat16, account_for_embedding_in_pipeline_split=True,
                            account_for_loss_in_pipeline_split=True)
    built = _layers_built(cfg)
    counts = split_counts(layers, pp, vpp or 1, FRAMEWORKS["megatron"])
    assert [sum(rank) for rank in built] == counts
    assert built[0] == chunk_sizes(counts[0], vpp or 1)
    assert built[-1] == chunk_sizes(counts[-1], vpp or 1)[::-1]
    if counts[0] < (vpp or 1):  # chunks of one layer: the plan's own chunks are Megatron Core's
        assert built[0] == stage_chunk_sizes(counts[0], vpp) and built[-1] == stage_chunk_sizes(counts[-1], vpp, True)


def test_an_interleaved_pipeline_of_equal_chunks(tmp_path):
    gpt = _gpt(tmp_path / "g32", 32)
    text = _render(gpt, 32, batch=64, device="a100-80gb", framework="megatron",
                   plan="tp=2,pp=4,sp=1,schedule=interleaved:2,microbatch=1")
    assert "--num-layers-per-virtual-pipeline-stage 4" in text and "layout" not in text
    cfg, _, _ = _megatron(text, 32)
    assert cfg.virtual_pipeline_model_parallel_size == 2
    assert _layers_built(cfg) == [[4, 4]] * 4


def test_float8_and_context_parallelism(tmp_path):
    gpt = _gpt(tmp_path / "g8", 8)
    text = _render(gpt, 16, batch=16, seq=8192, device="h100", framework="megatron", float8=True,
                   plan="tp=4,cp=2,sp=1,recompute=selective,zero=1")
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in text
    cfg, ddp, _ = _megatron(text, 8)
    assert (cfg.tensor_model_parallel_size, cfg.context_parallel_size, cfg.pipeline_model_parallel_size) == (4, 2, 1)
    assert cfg.fp8 == "hybrid" and cfg.fp8_amax_history_len == 1024 and cfg.fp8_amax_compute_algo == "max"
    assert ddp.use_distributed_optimizer is True


def test_overlapped_tensor_parallelism(tmp_path):
    """A plan costed with --tp-overlap asks for Megatron's --tp-comm-overlap,
    which its TransformerConfig takes beside sequence parallelism."""
    gpt = _gpt(tmp_path / "g8", 8)
    text = _render(gpt, 16, batch=16, seq=4096, device="h100", framework="megatron", tp_overlap=True,
                   plan="tp=4,sp=1,zero=1")
    cfg, _, flags = _megatron(text, 8)
    assert "tp_comm_overlap" in flags and cfg.tp_comm_overlap is True and cfg.sequence_parallel is True
    plain, _, flags = _megatron(_render(gpt, 16, batch=16, seq=4096, device="h100", framework="megatron",
                                        plan="tp=4,sp=1,zero=1"), 8)
    assert "tp_comm_overlap" not in flags and plain.tp_comm_overlap is False


def test_experts_with_tensor_and_sequence_parallelism():
    text = _render(MIXTRAL, 64, batch=256, seq=4096, device="h100", framework="megatron",
                   plan="tp=2,ep=8,sp=1,zero=1,recompute=full")
    # the model's own arguments: Mixtral's 8 experts, 2 per token, no biases (--disable-bias-linear)
    cfg, _, _ = _megatron(text, 32, heads=32, hidden=4096, num_moe_experts=8, moe_router_topk=2,
                          add_bias_linear=False)
    assert (cfg.tensor_model_parallel_size, cfg.expert_model_parallel_size, cfg.sequence_parallel) == (2, 8, True)
    # no flag for it: Megatron's default, the tensor-parallel size, splits each expert by tp as the plan costs it
    assert cfg.expert_tensor_parallel_size == 2
    # the experts' products grouped and the tokens sent all-to-all, as the plan costs them (not the default
    # dispatcher, which all-gathers them)
    assert cfg.moe_grouped_gemm is True and cfg.moe_token_dispatcher_type == "alltoall"


def test_recomputed_modules():
    """A plan costed with --recompute-modules: Megatron Core's selective
    recomputation of those modules, which its config accepts (moe_act
    beside the grouped products it needs)."""
    text = _render(MIXTRAL, 64, batch=256, seq=4096, device="h100", framework="megatron",
                   recompute_modules="layernorm,moe_act", plan="tp=2,ep=8,sp=1,zero=1,recompute=selective")
    cfg, _, flags = _megatron(text, 32, heads=32, hidden=4096, num_moe_experts=8, moe_router_topk=2,
                              add_bias_linear=False)
    assert flags["recompute_modules"] == ["layernorm", "moe_act"]
    assert cfg.recompute_granularity == "selective" and cfg.recompute_modules == ["layernorm", "moe_act"]
    plain = _render(MIXTRAL, 64, batch=256, seq=4096, device="h100", framework="megatron",
                    plan="tp=2,ep=8,sp=1,zero=1,recompute=selective")
    cfg, _, flags = _megatron(plain, 32, heads=32, hidden=4096, num_moe_experts=8, moe_router_topk=2,
                              add_bias_linear=False)
    assert "recompute_modules" not in flags and cfg.recompute_modules == ["core_attn"]  # Megatron's default


def test_experts_dispatched_through_deepep():
    """A plan costed with --deepep: Megatron Core's flex dispatcher with
    its DeepEP backend, which its config accepts."""
    text = _render(MIXTRAL, 64, batch=256, seq=4096, device="h100", framework="megatron", deepep=True,
                   plan="tp=2,ep=8,sp=1,zero=1")
    cfg, _, _ = _megatron(text, 32, heads=32, hidden=4096, num_moe_experts=8, moe_router_topk=2,
                          add_bias_linear=False)
    assert (cfg.moe_token_dispatcher_type, cfg.moe_flex_dispatcher_backend) == ("flex", "deepep")
    assert cfg.moe_grouped_gemm is True and cfg.moe_enable_deepep is False  # the backend's flag, not the old switch


def test_megatron_fsdp(tmp_path):
    gpt = _gpt(tmp_path / "g8", 8)
    text = _render(gpt, 16, batch=64, device="a100-80gb", framework="megatron", plan="dp=16,zero=3")
    cfg, ddp, flags = _megatron(text, 8)
    assert ddp.use_megatron_fsdp is True and ddp.data_parallel_sharding_strategy == "optim_grads_params"
    assert ddp.use_distributed_optimizer is True and cfg.gradient_accumulation_fusion is False
    assert flags["ckpt_format"] == "fsdp_dtensor"


QWEN3_MOE = str(ROOT / "tests" / "data" / "families" / "qwen3_moe" / "config.json")


@pytest.mark.parametrize("plan", ["tp=2,ep=8,etp=1,sp=1,zero=1", "tp=2,ep=16,etp=1,sp=1,zero=1",
                                  "tp=4,ep=4,etp=1,sp=1,zero=1", "tp=2,ep=4,sp=1,zero=1", "tp=4,ep=2,etp=2,sp=1,zero=1",
                                  "cp=2,ep=4,zero=1"])
def test_megatron_cores_expert_groups_are_the_plans(plan):
    """Megatron Core's process groups (``initialize_model_parallel`` on a
    fake process group of 16 ranks, nodes of 8) from the exported flags:
    its expert-parallel, expert tensor-parallel and expert data-parallel
    sizes are the plan's splits of an expert operator (its experts, its
    hidden units, its tokens), and its expert group of rank 0 spans as
    many nodes as the cost model's layout puts the experts' split over."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from megatron.core import parallel_state as ps

    from cost.rules import extents
    from exports.frameworks import FRAMEWORKS as EXPORTS
    from exports.frameworks.plans import PlanView
    from graph import operators
    from planner import plan as make
    from settings import Settings

    p = make(Settings(graph=QWEN3_MOE, procs=16, batch=16, seq=4096, device="h100", framework="megatron",
                      plan=plan))
    flags = _flags(_words(EXPORTS["megatron"].render(PlanView(p.settings, p.graph, p.result))))
    ops = operators(p.graph)
    v = next(i for i, op in enumerate(ops) if op.name == "layer0/mlp/gate_up")
    split = dict(zip(ops[v].dims, p.result.strategy[v].config))
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=16)
    try:
        ps.initialize_model_parallel(
            tensor_model_parallel_size=int(flags["tensor_model_parallel_size"]),
            pipeline_model_parallel_size=int(flags["pipeline_model_parallel_size"]),
            context_parallel_size=int(flags["context_parallel_size"]),
            expert_model_parallel_size=int(flags["expert_model_parallel_size"]),
            expert_tensor_parallel_size=int(flags.get("expert_tensor_parallel_size",
                                                      flags["tensor_model_parallel_size"])),
            create_gloo_process_groups=False)
        sizes = (ps.get_expert_model_parallel_world_size(), ps.get_expert_tensor_parallel_world_size(),
                 ps.get_expert_data_parallel_world_size())
        nodes = len({r // 8 for r in dist.get_process_group_ranks(ps.get_expert_model_parallel_group())})
    finally:
        ps.destroy_model_parallel()
        dist.destroy_process_group()
    assert sizes == (split["x"], split["f"], split["b"] * split["s"])
    _, C = extents(ops[v], [p.result.strategy[v].config])
    assert p.result.cost_model.cluster.across(C, "x")[0] == nodes
