"""The ``torchtitan`` exports, read by torchtitan 0.3 itself: the bash
array, as bash reads it, goes through torchtitan's own config parser
(``torchtitan.config.ConfigManager``: the named model and config, the
overrides, the activation-checkpointing subcommand, its validation), and
the parsed parallelism builds torchtitan's ``ParallelDims`` and device
mesh on a fake process group of the plan's size.

Needs torch and torchtitan (``requirements-torch.txt``); CI installs them
in a second environment where this file must not skip."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT, bash_array, export_text

pytest.importorskip("torch", reason="torch is not installed (pip install -r requirements-torch.txt)")
pytest.importorskip("torchtitan", reason="torchtitan is not installed (pip install -r requirements-torch.txt)")

CONFIGS = ROOT / "tests" / "data" / "configs"
LLAMA, MISTRAL, QWEN2, MIXTRAL = (str(CONFIGS / n / "config.json") for n in
                                  ("llama3-8b", "mistral-7b", "qwen2-0.5b", "mixtral-8x7b"))
SMALL_LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
               "num_key_value_heads": 2, "num_hidden_layers": 4, "vocab_size": 256, "max_position_embeddings": 64}


def _render(graph: str, procs: int, **kw) -> str:
    return export_text("torchtitan", graph, procs, **kw)


def _words(text: str) -> list[str]:
    return bash_array(text, "PASE_TORCHTITAN_ARGS")


def _parsed(words: list[str]):
    from torchtitan.config import ConfigManager

    return ConfigManager().parse_args(words)


def _mesh_sizes(parallelism, procs: int) -> dict:
    """torchtitan's ParallelDims and mesh of the parsed parallelism, on a
    fake process group of ``procs`` ranks: the size of each enabled mesh."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from torchtitan.distributed import ParallelDims

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=procs)
    try:
        dims = ParallelDims.from_config(parallelism, procs)
        dims.build_mesh()
        return {name: dims.get_mesh(name).size() for name in ("pp", "dp_replicate", "dp_shard", "cp", "tp", "ep", "efsdp")
                if dims.get_optional_mesh(name) is not None}
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def small_llama(tmp_path_factory):
    folder = tmp_path_factory.mktemp("configs") / "small-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(SMALL_LLAMA))
    return str(folder / "config.json")


def test_llama3_8b_fsdp_tp_sp_full_recompute():
    from torchtitan.distributed.activation_checkpoint import FullAC

    words = _words(_render(LLAMA, 64, plan="tp=8,dp=8,zero=3,sp=1,recompute=full", seq=4096, batch=256))
    assert words[:4] == ["--module", "llama3", "--config", "llama3_8b"]  # torchtitan's own Llama 3 8B
    cfg = _parsed(words)
    par = cfg.parallelism
    assert (par.tensor_parallel_degree, par.data_parallel_shard_degree, par.data_parallel_replicate_degree) == (8, 8, 1)
    assert par.enable_sequence_parallel is True and cfg.compile.enable_async_tensor_parallel is False
    assert isinstance(cfg.activation_checkpoint, FullAC.Config)
    assert (cfg.training.local_batch_size, cfg.training.global_batch_size, cfg.training.seq_len) == (32, 256, 4096)
    assert _mesh_sizes(par, 64) == {"dp_shard": 8, "tp": 8}


def test_llama3_8b_interleaved_pipeline_selective_recompute_bf16():
    from torchtitan.distributed.activation_checkpoint import SelectiveAC

    cfg = _parsed(_words(_render(LLAMA, 64, plan="tp=8,dp=4,pp=2,schedule=interleaved,recompute=selective",
                                 batch=512, precision="bf16")))
    par = cfg.parallelism
    assert par.pipeline_parallel_degree == 2 and par.pipeline_parallel_schedule == "Interleaved1F1B"
    parts = par.module_fqns_per_model_part
    assert len(parts) == 4 and [m for part in parts for m in part] == \
        ["tok_embeddings"] + [f"layers.{i}" for i in range(32)] + ["norm", "lm_head"]
    assert par.enable_sequence_parallel is False and cfg.training.disable_cuda_graphs is True
    assert isinstance(cfg.activation_checkpoint, SelectiveAC.Config)
    assert cfg.training.mixed_precision_param == "bfloat16" and cfg.training.local_batch_size == 128
    assert _mesh_sizes(par, 64) == {"pp": 2, "dp_replicate": 4, "dp_shard": 1, "tp": 8}


def test_an_interleaved_pipeline_of_unequal_chunks():
    """32 layers over 3 stages of 2 chunks (11, 11 and 10 layers: chunks of
    5 and 6, 5 and 6, 5 and 5): torchtitan takes the six model parts as the
    plan was costed, part k on stage k mod 3."""
    cfg = _parsed(_words(_render(LLAMA, 48, plan="tp=8,dp=2,pp=3,microbatch=2,schedule=interleaved", batch=96)))
    par = cfg.parallelism
    assert par.pipeline_parallel_degree == 3 and par.pipeline_parallel_schedule == "Interleaved1F1B"
    parts = par.module_fqns_per_model_part
    assert [sum(m.startswith("layers.") for m in part) for part in parts] == [5, 5, 5, 6, 6, 5]
    assert [m for part in parts for m in part] == \
        ["tok_embeddings"] + [f"layers.{i}" for i in range(32)] + ["norm", "lm_head"]
    assert _mesh_sizes(par, 48) == {"pp": 3, "dp_replicate": 2, "dp_shard": 1, "tp": 8}


def test_context_parallelism_and_the_transformers_backend():
    cfg = _parsed(_words(_render(MISTRAL, 64, plan="tp=4,cp=2,dp=8,zero=3", seq=4096, batch=256)))
    assert cfg.hf_model == str(CONFIGS / "mistral-7b")  # the config's directory, read by torchtitan's backend
    assert cfg.activation_checkpoint is None  # activation-checkpoint:none
    assert _mesh_sizes(cfg.parallelism, 64) == {"dp_shard": 8, "cp": 2, "tp": 4}


def test_uneven_pipeline_of_the_transformers_backend():
    cfg = _parsed(_words(_render(QWEN2, 48, plan="tp=2,pp=3,dp=8,zero=3,sp=1", batch=96)))
    parts = cfg.parallelism.module_fqns_per_model_part
    assert [sum(m.startswith("layers.") for m in part) for part in parts] == [8, 8, 8]
    assert all(part[-1] == "rotary_emb" for part in parts)  # every part of the backend computes its positions
    assert _mesh_sizes(cfg.parallelism, 48) == {"pp": 3, "dp_shard": 8, "tp": 2}


def test_experts_borrow_the_fsdp_ranks():
    cfg = _parsed(_words(_render(MIXTRAL, 64, plan="ep=8,zero=3", batch=256)))
    assert cfg.hf_model.endswith("mixtral-8x7b") and cfg.parallelism.expert_parallel_degree == 8
    assert _mesh_sizes(cfg.parallelism, 64) == {"dp_shard": 64, "ep": 8, "efsdp": 8}


def test_folded_experts_borrow_the_tensor_parallel_ranks_too():
    """``etp=1``: torchtitan 0.3's experts run without tensor parallelism,
    over ``dp_shard x cp x tp`` ranks; its mesh is the plan's: 8 expert
    groups of 8, each expert's weights sharded (efsdp) over the 8
    devices that hold its tokens (the cost model's expert data
    parallelism: 64 / 8)."""
    from planner import plan
    from settings import Settings

    cfg = _parsed(_words(_render(MIXTRAL, 64, plan="tp=2,ep=8,etp=1,sp=1,zero=3", batch=256)))
    sizes = _mesh_sizes(cfg.parallelism, 64)
    assert sizes == {"dp_shard": 32, "tp": 2, "ep": 8, "efsdp": 8}
    p = plan(Settings(graph=MIXTRAL, procs=64, batch=256, plan="tp=2,ep=8,etp=1,sp=1,zero=3"))
    gate_up = next(x for x in p.result.layers if x.name == "layer0/mlp/gate_up").decision
    split = dict(zip(gate_up.dims, gate_up.config))
    assert (sizes["ep"], sizes["efsdp"]) == (split["x"], split["b"] * split["s"]) and split["f"] == 1


def test_a_searched_pipeline(small_llama):
    cfg = _parsed(_words(_render(small_llama, 8, batch=64, seq=16, pp="2", bw=1000.0)))
    par = cfg.parallelism
    assert par.pipeline_parallel_degree == 2 and par.data_parallel_replicate_degree == 4
    assert [m for part in par.module_fqns_per_model_part for m in part if m.startswith("layers.")] == \
        [f"layers.{i}" for i in range(4)]
    assert _mesh_sizes(par, 8) == {"pp": 2, "dp_replicate": 4, "dp_shard": 1}


def test_a_plan_costed_with_overlapped_tensor_parallelism_turns_async_tp_on():
    """--tp-overlap (under --compile) becomes torchtitan's asynchronous
    tensor parallelism, which its CompileConfig accepts with compile on."""
    cfg = _parsed(_words(_render(LLAMA, 64, plan="tp=8,dp=8,zero=3,sp=1", seq=4096, batch=256, device="h100",
                                 framework="torchtitan", compile=True, tp_overlap=True)))
    assert cfg.compile.enable is True and cfg.compile.enable_async_tensor_parallel is True


def test_a_plan_costed_compiled_parses_as_compiled():
    cfg = _parsed(_words(_render(LLAMA, 64, plan="tp=8,dp=8,zero=3,sp=1", seq=4096, batch=256, device="h100",
                                 framework="torchtitan", compile=True)))
    assert cfg.compile.enable is True and list(cfg.compile.components) == ["model", "loss"]
    assert cfg.compile.enable_async_tensor_parallel is False
