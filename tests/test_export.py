"""--export FORMAT[:PATH]: plans a framework can run.

The text formats' content for known standard configurations (torchtitan's
TOML, Megatron-LM's arguments, DTensor placements, the JAX shardings), the
standard configuration recognised in searched and evaluated plans, what
each format refuses, the command line (stdout, files, refusals that leave
existing files alone), and, with jax installed, the exported JAX shardings
run on XLA's CPU partitioner with 8 devices: numerics against the
unsharded model and the collectives the cost model charges."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tomllib
from functools import lru_cache

import pytest

from conftest import (ROOT, bash_array, modules_loaded_by_a_plain_run, one_line_error, outputs_under_hash_seeds,
                      run_cli)

LLAMA = str(ROOT / "tests" / "data" / "configs" / "llama3-8b" / "config.json")
MIXTRAL = str(ROOT / "tests" / "data" / "configs" / "mixtral-8x7b" / "config.json")
HAVE_JAX = importlib.util.find_spec("jax") is not None


@lru_cache(maxsize=None)
def planned(graph: str, procs: int, **kw):
    from exports.frameworks.plans import PlanView
    from planner import plan
    from settings import Settings

    p = plan(Settings(graph=graph, procs=procs, **kw))
    return PlanView(p.settings, p.graph, p.result)


def render(fmt: str, graph: str, procs: int, **kw) -> str:
    from exports.frameworks import FRAMEWORKS

    return FRAMEWORKS[fmt].render(planned(graph, procs, **kw))


def refused(fmt: str, graph: str, procs: int, **kw) -> str:
    from errors import InputError

    with pytest.raises(InputError) as e:
        render(fmt, graph, procs, **kw)
    text = str(e.value)
    assert "\n" not in text and text.startswith(f"--export {fmt}: ")
    return text


def megatron_args(text: str) -> list[str]:
    return bash_array(text, "PASE_PARALLEL_ARGS")


def flag_value(args: list[str], flag: str):
    return args[args.index(flag) + 1] if flag in args else None


# -- torchtitan ------------------------------------------------------------------------


class TestTorchtitan02:
    def test_llama3_8b_tp8_fsdp8_full_recompute(self):
        text = render("torchtitan@0.2", LLAMA, 64, plan="tp=8,dp=8,recompute=full,zero=3", seq=4096, batch=256)
        assert "torchtitan v0.2" in text.splitlines()[2]  # the version whose keys it follows, in the header
        cfg = tomllib.loads(text)
        par = cfg["parallelism"]
        assert par["tensor_parallel_degree"] == 8
        assert par["data_parallel_shard_degree"] == 8 and par["data_parallel_replicate_degree"] == 1
        assert par["context_parallel_degree"] == 1 and par["pipeline_parallel_degree"] == 1
        assert par["expert_parallel_degree"] == 1 and par["enable_async_tensor_parallel"] is False
        assert cfg["activation_checkpoint"] == {"mode": "full"}
        assert cfg["training"] == {"local_batch_size": 32, "global_batch_size": 256, "seq_len": 4096}
        assert "sp=0" in text  # torchtitan's tensor parallelism is sequence-parallel: said in a comment

    def test_zero_0_replicates_and_precision(self):
        cfg = tomllib.loads(render("torchtitan@0.2", LLAMA, 64, plan="tp=4,dp=16,sp=1,recompute=selective",
                                   precision="bf16"))
        assert cfg["parallelism"]["data_parallel_replicate_degree"] == 16
        assert cfg["parallelism"]["data_parallel_shard_degree"] == 1
        assert cfg["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "op"}
        assert cfg["training"]["mixed_precision_param"] == "bfloat16"

    def test_interleaved_pipeline_model_parts(self):
        cfg = tomllib.loads(render("torchtitan@0.2", LLAMA, 64, plan="tp=8,dp=4,pp=2,microbatch=2,schedule=interleaved",
                                   batch=512))
        par = cfg["parallelism"]
        assert par["pipeline_parallel_degree"] == 2 and par["pipeline_parallel_schedule"] == "Interleaved1F1B"
        assert par["pipeline_parallel_microbatch_size"] == 2
        assert cfg["training"]["local_batch_size"] == 512 // 4  # per data-parallel rank, every micro-batch
        parts = par["module_fqns_per_model_part"]
        assert len(parts) == 4  # 2 stages x 2 chunks
        flat = [m for part in parts for m in part]
        assert flat == ["tok_embeddings"] + [f"layers.{i}" for i in range(32)] + ["norm", "output"]
        assert [sum(m.startswith("layers.") for m in part) for part in parts] == [8, 8, 8, 8]

    def test_interleaved_chunks_of_unequal_layers(self):
        """32 layers over 3 stages (11, 11, 10) of 2 chunks each: torchtitan's
        model parts hold the chunks as the plan was costed (5 and 6, 5 and
        6, 5 and 5: the later chunk, held for fewer micro-batches, takes the
        extra layer), part k on stage k mod 3."""
        cfg = tomllib.loads(render("torchtitan@0.2", LLAMA, 48, plan="tp=8,dp=2,pp=3,microbatch=2,schedule=interleaved",
                                   batch=96))
        parts = cfg["parallelism"]["module_fqns_per_model_part"]
        assert [sum(m.startswith("layers.") for m in part) for part in parts] == [5, 5, 5, 6, 6, 5]
        flat = [m for part in parts for m in part]
        assert flat == ["tok_embeddings"] + [f"layers.{i}" for i in range(32)] + ["norm", "output"]

    def test_expert_parallelism_is_dp2ep(self):
        cfg = tomllib.loads(render("torchtitan@0.2", MIXTRAL, 64, plan="tp=2,ep=8,zero=3,sp=1", batch=256))
        par = cfg["parallelism"]
        assert par["expert_parallel_degree"] == 8 and par["expert_tensor_parallel_degree"] == 2
        assert par["data_parallel_shard_degree"] == 32

    @pytest.mark.parametrize("kw, words", [
        (dict(plan="tp=8,dp=8,zero=1"), "zero=1 shards the optimizer state"),
        (dict(plan="tp=8,dp=8,zero=2"), "zero=2 shards the optimizer state and gradients"),
        (dict(plan="tp=8,dp=8", precision="fp16"), "fp16"),
    ])
    def test_refusals(self, kw, words):
        assert words in refused("torchtitan@0.2", LLAMA, 64, **kw)

    def test_refuses_expert_parallelism_without_fsdp(self):
        assert "give zero=3" in refused("torchtitan@0.2", MIXTRAL, 64, plan="tp=2,ep=8,sp=1", batch=256)

    def test_refuses_a_model_that_is_not_a_transformer(self):
        assert "alexnet is not a transformer" in refused("torchtitan@0.2", "alexnet", 8, plan="tp=2")


class TestTorchtitan:
    """torchtitan 0.3's command line (tests/test_torch_torchtitan.py parses
    it with torchtitan itself)."""

    def test_llama3_8b_is_torchtitans_own_config(self):
        args = bash_array(render("torchtitan", LLAMA, 64, plan="tp=8,dp=8,zero=3,sp=1,recompute=full", seq=4096,
                                 batch=256), "PASE_TORCHTITAN_ARGS")
        assert args[:4] == ["--module", "llama3", "--config", "llama3_8b"]
        assert flag_value(args, "--parallelism.tensor_parallel_degree") == "8"
        assert flag_value(args, "--parallelism.data_parallel_shard_degree") == "8"
        assert flag_value(args, "--training.local_batch_size") == "32"
        assert "--parallelism.enable_sequence_parallel" in args and "--compile.no_enable_async_tensor_parallel" in args
        assert args[-1] == "activation-checkpoint:full"  # the subcommand, last

    def test_a_plan_costed_compiled_compiles_and_float8_is_refused_in_one_line(self):
        kw = dict(plan="tp=8,dp=8,zero=3,sp=1", seq=4096, batch=256, device="h100", framework="torchtitan")
        eager = bash_array(render("torchtitan", LLAMA, 64, **kw), "PASE_TORCHTITAN_ARGS")
        compiled = bash_array(render("torchtitan", LLAMA, 64, compile=True, **kw), "PASE_TORCHTITAN_ARGS")
        assert "--compile.enable" not in eager and "--compile.enable" in compiled
        i = compiled.index("--compile.components")
        assert compiled[i + 1] == "model,loss"  # a list, as torchtitan's parser reads one
        assert "Float8LinearConverter" in refused("torchtitan", LLAMA, 64, compile=True, float8=True, **kw)
        toml = tomllib.loads(render("torchtitan@0.2", LLAMA, 64, compile=True, float8=True, **kw))
        assert toml["compile"] == {"enable": True, "components": ["model", "loss"]}
        assert toml["model"]["converters"] == ["float8"] and toml["float8"]["enable_fsdp_float8_all_gather"] is True
        assert "compile" not in tomllib.loads(render("torchtitan@0.2", LLAMA, 64, **kw))
        # costed as December 2024's torchtitan ran, its loss eager: the job compiles the model alone
        old = {**kw, "framework": "torchtitan@2024-12"}
        compiled = bash_array(render("torchtitan", LLAMA, 64, compile=True, **old), "PASE_TORCHTITAN_ARGS")
        assert compiled[compiled.index("--compile.components") + 1] == "model"
        assert tomllib.loads(render("torchtitan@0.2", LLAMA, 64, compile=True, **old))["compile"]["components"] == \
            ["model"]
        megatron = render("megatron", LLAMA, 64, float8=True, **{**kw, "framework": "megatron"})
        assert "--fp8-format hybrid" in megatron
        assert "--fp8-format" not in render("megatron", LLAMA, 64, **{**kw, "framework": "megatron"})

    def test_a_plan_costed_with_overlapped_tensor_parallelism_asks_for_it(self):
        kw = dict(plan="tp=8,dp=8,zero=3,sp=1", seq=4096, batch=256, device="h100", compile=True)
        over = bash_array(render("torchtitan", LLAMA, 64, framework="torchtitan", tp_overlap=True, **kw),
                          "PASE_TORCHTITAN_ARGS")
        assert "--compile.enable_async_tensor_parallel" in over and "--compile.no_enable_async_tensor_parallel" \
            not in over
        toml = tomllib.loads(render("torchtitan@0.2", LLAMA, 64, framework="torchtitan", tp_overlap=True, **kw))
        assert toml["parallelism"]["enable_async_tensor_parallel"] is True and toml["compile"]["enable"] is True
        mega = {**kw, "framework": "megatron", "plan": "tp=8,dp=8,sp=1,zero=1"}
        del mega["compile"]
        assert "--tp-comm-overlap" in megatron_args(render("megatron", LLAMA, 64, tp_overlap=True, **mega))
        assert "--tp-comm-overlap" not in megatron_args(render("megatron", LLAMA, 64, **mega))
        # Megatron-LM overlaps only with sequence parallelism (its arguments.py asserts it), as the plan is costed
        no_sp = {**mega, "plan": "tp=8,dp=8,zero=1"}
        assert "--tp-comm-overlap" not in megatron_args(render("megatron", LLAMA, 64, tp_overlap=True, **no_sp))
        # costed under Megatron-LM, without torch.compile: torchtitan's asynchronous tensor parallelism stays off
        text = render("torchtitan", LLAMA, 64, tp_overlap=True, **{**mega, "plan": "tp=8,dp=8,sp=1,zero=3"})
        assert "--compile.no_enable_async_tensor_parallel" in bash_array(text, "PASE_TORCHTITAN_ARGS")
        assert "# costed with --tp-overlap under Megatron-LM; torchtitan's asynchronous tensor parallelism" in text

    def test_other_configs_run_on_the_transformers_backend(self):
        args = bash_array(render("torchtitan", MIXTRAL, 64, plan="ep=8,zero=3", batch=256), "PASE_TORCHTITAN_ARGS")
        assert flag_value(args, "--config") == "transformers_modeling_backend_full_moe"
        assert flag_value(args, "--hf_model") == str(ROOT / "tests" / "data" / "configs" / "mixtral-8x7b")
        assert flag_value(args, "--parallelism.expert_parallel_degree") == "8"
        assert "--parallelism.no_enable_sequence_parallel" in args and args[-1] == "activation-checkpoint:none"

    def test_pipeline_parts(self):
        args = bash_array(render("torchtitan", LLAMA, 48, plan="tp=8,dp=2,pp=3", batch=96), "PASE_TORCHTITAN_ARGS")
        i = args.index("--parallelism.module_fqns_per_model_part")
        parts = [p.split(",") for p in args[i + 1:i + 4]]
        assert [sum(m.startswith("layers.") for m in p) for p in parts] == [11, 11, 10]
        assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "lm_head"]
        assert "--training.disable_cuda_graphs" in args

    @pytest.mark.parametrize("graph, kw, words", [
        (LLAMA, dict(plan="tp=8,dp=8,zero=1"), "zero=1 shards the optimizer state"),
        (MIXTRAL, dict(plan="tp=2,ep=8,zero=3,sp=1", batch=256), "runs the experts without tensor parallelism"),
        (MIXTRAL, dict(plan="ep=8", batch=256), "give zero=3"),
        (LLAMA, dict(plan="tp=8,dp=8", precision="fp16"), "fp16"),
    ])
    def test_refusals(self, graph, kw, words):
        assert words in refused("torchtitan", graph, 64, **kw)

    def test_refuses_a_built_in_graph(self):
        assert "is no Hugging Face config" in refused("torchtitan", "transformer", 8, plan="tp=2")

    @pytest.mark.parametrize("family, has", [("phi3", "a fused qkv_proj and gate_up_proj"),
                                             ("glm", "a fused gate_up_proj"), ("glm4", "a fused gate_up_proj"),
                                             ("gpt_neox", "its attention named attention, not self_attn"),
                                             ("starcoder2", "c_fc and c_proj")])
    def test_refuses_the_projections_the_backend_cannot_shard(self, family, has):
        config = str(ROOT / "tests" / "data" / "families" / family / "config.json")
        message = refused("torchtitan", config, 8, plan="dp=8,zero=3", batch=8, seq=64)
        assert f"which {family} has not ({has}" in message
        assert message.endswith("--export jax")
        assert refused("dtensor", config, 8, plan="dp=8,zero=3", batch=8, seq=64).endswith(
            f"not of {family}: export it with --export jax")

    def test_notes_what_the_backend_builds_otherwise(self):
        families = ROOT / "tests" / "data" / "families"
        tied = render("torchtitan", str(families / "ernie4_5" / "config.json"), 8, plan="dp=8,zero=3", batch=8,
                      seq=64)
        assert "# the backend unties the embedding and the head: the job trains 105,906,176 more parameters" in tied
        assert "attention_bias" not in tied  # its biases are use_bias's, which the backend leaves alone
        biased = render("torchtitan", str(families / "seed_oss" / "config.json"), 8, plan="dp=8,zero=3", batch=8,
                        seq=64)
        assert "# the backend builds the model with attention_bias off" in biased and "unties" not in biased
        plain = render("torchtitan", str(ROOT / "tests" / "data" / "configs" / "mistral-7b" / "config.json"), 8,
                       plan="dp=8,zero=3", batch=8, seq=64)
        assert "unties" not in plain and "biases" not in plain


# -- Megatron-LM -----------------------------------------------------------------------


class TestMegatron:
    def test_llama3_8b_tp8_distributed_optimizer(self):
        text = render("megatron", LLAMA, 64, plan="tp=8,dp=8,recompute=full,zero=1", seq=4096, batch=512,
                      precision="bf16")
        assert "Megatron Core r0.15" in text
        args = megatron_args(text)
        assert flag_value(args, "--tensor-model-parallel-size") == "8"
        assert flag_value(args, "--pipeline-model-parallel-size") == "1"
        assert flag_value(args, "--context-parallel-size") == "1"
        assert flag_value(args, "--micro-batch-size") == "64" and flag_value(args, "--global-batch-size") == "512"
        assert flag_value(args, "--seq-length") == "4096"
        assert flag_value(args, "--recompute-granularity") == "full"
        assert flag_value(args, "--recompute-method") == "uniform" and flag_value(args, "--recompute-num-layers") == "1"
        assert "--use-distributed-optimizer" in args and "--bf16" in args
        assert "--sequence-parallel" not in args and "--use-megatron-fsdp" not in args

    def test_the_environment_it_needs(self):
        env = "\nprintf '%s\\n' \"${CUDA_DEVICE_MAX_CONNECTIONS-unset}\""
        run = lambda text: subprocess.run(["bash", "-c", text + env], capture_output=True, text=True,  # noqa: E731
                                          check=True).stdout.strip()
        assert run(render("megatron", LLAMA, 64, plan="tp=8,dp=8")) == "1"  # tensor parallelism needs it
        assert run(render("megatron", LLAMA, 64, plan="tp=1,cp=2,dp=32")) == "1"
        assert run(render("megatron", LLAMA, 64, plan="dp=64,zero=1")) == "unset"

    def test_fsdp_is_megatron_fsdp(self):
        args = megatron_args(render("megatron", LLAMA, 64, plan="tp=8,dp=8,zero=3,sp=1"))
        assert "--use-megatron-fsdp" in args and "--sequence-parallel" in args
        assert flag_value(args, "--data-parallel-sharding-strategy") == "optim_grads_params"
        args = megatron_args(render("megatron", LLAMA, 64, plan="tp=8,dp=8,zero=2"))
        assert flag_value(args, "--data-parallel-sharding-strategy") == "optim_grads"

    def test_interleaved_and_uneven_pipelines(self):
        args = megatron_args(render("megatron", LLAMA, 64, plan="tp=8,dp=4,pp=2,schedule=interleaved",
                                    batch=512, precision="fp16"))
        assert flag_value(args, "--num-layers-per-virtual-pipeline-stage") == "8" and "--fp16" in args
        args = megatron_args(render("megatron", LLAMA, 48, plan="tp=8,dp=2,pp=3", batch=96))
        layout = flag_value(args, "--pipeline-model-parallel-layout")
        assert [s.count("t") for s in layout.split("|")] == [11, 11, 10]  # 32 layers as the cost model split them
        assert layout.startswith("E") and layout.endswith("L")
        assert "--pipeline-model-parallel-layout" not in megatron_args(render("megatron", LLAMA, 64,
                                                                             plan="tp=8,dp=4,pp=2"))
        # interleaved chunks of unequal layers: one layout stage per virtual stage, in the model's order
        args = megatron_args(render("megatron", LLAMA, 64, plan="tp=8,dp=2,pp=4,schedule=interleaved:3", batch=128))
        layout = flag_value(args, "--pipeline-model-parallel-layout").split("|")
        assert [s.count("t") for s in layout] == [2] * 4 + [3] * 8  # 8 layers a stage: 2, 3 and 3
        assert layout[0].startswith("E") and layout[-1].endswith("L")
        assert "--num-layers-per-virtual-pipeline-stage" not in args

    @pytest.mark.parametrize("graph, kw, words", [
        (LLAMA, dict(plan="tp=8,dp=4,pp=2,schedule=gpipe"), "not GPipe"),
        (LLAMA, dict(plan="tp=8,dp=4,pp=2,zero=3"), "does not run with pipeline stages"),
        (MIXTRAL, dict(plan="tp=2,ep=8", batch=256), "give sp=1"),
        # 64 / (8 x 4) = dp 2: 20 samples are 10 micro-batches of 1 a rank, no multiple of pp 4
        (LLAMA, dict(plan="tp=8,pp=4,schedule=interleaved:2,microbatch=1", batch=20),
         "refuses 10 micro-batches with pp=4: give a batch that is a multiple of 8 (pp x dp x micro-batch)"),
    ])
    def test_refusals(self, graph, kw, words):
        assert words in refused("megatron", graph, 64, **kw)

    def test_notes_a_family_whose_layers_run_side_by_side(self):
        neox = str(ROOT / "tests" / "data" / "families" / "gpt_neox" / "config.json")
        text = render("megatron", neox, 16, plan="tp=4,dp=4,sp=1", batch=16, seq=256)
        assert "# Megatron-LM's layers run attention, then the feed-forward; gpt_neox's run them side by side" in text
        assert "side by side" not in render("megatron", LLAMA, 64, plan="tp=8,dp=8")

    def test_an_interleaved_pipeline_of_whole_groups_of_micro_batches(self):
        args = megatron_args(render("megatron", LLAMA, 64, plan="tp=8,pp=4,schedule=interleaved:2,microbatch=1",
                                    batch=32))
        assert flag_value(args, "--num-layers-per-virtual-pipeline-stage") == "4"


# -- DTensor ---------------------------------------------------------------------------


class TestDTensor:
    """The PyTorch plan's content (tests/test_torch_plans.py applies it to
    transformers models and runs it)."""

    def test_llama3_8b_tp_fsdp(self):
        doc = json.loads(render("dtensor", LLAMA, 64, plan="tp=8,dp=8,zero=3", seq=4096))
        assert doc["model_class"] == "LlamaForCausalLM" and "PyTorch" in doc["api"]
        assert doc["mesh"] == {"dim_names": ["dp_replicate", "dp_shard", "tp"], "shape": [1, 8, 8]}
        assert "cuda" not in json.dumps(doc)  # the device type is the caller's
        plan = doc["tensor_parallel"]["plan"]
        assert plan["model.layers.*.self_attn.q_proj"] == {"style": "ColwiseParallel"}
        assert plan["model.layers.*.self_attn.k_proj"] == {"style": "ColwiseParallel"}  # the key/value heads split
        assert plan["model.layers.*.self_attn.o_proj"]["style"] == "RowwiseParallel"
        assert plan["model.layers.*.mlp.down_proj"]["style"] == "RowwiseParallel"
        assert plan["model.embed_tokens"]["style"] == "RowwiseParallel"  # over the vocabulary
        assert plan["lm_head"]["output_layouts"] == "Shard(-1)" and doc["tensor_parallel"]["loss_parallel"]
        assert not any("norm" in k for k in plan)  # without sp the norms are replicated
        dp = doc["data_parallel"]
        assert dp["shard"] == ["dp_shard"] and dp["fully_shard"] == [f"model.layers.{i}" for i in range(32)]

    def test_sequence_parallel_experts_and_replication(self):
        doc = json.loads(render("dtensor", MIXTRAL, 64, plan="tp=2,dp=32,sp=1", batch=256))
        plan = doc["tensor_parallel"]["plan"]
        assert plan["model.layers.*.input_layernorm"] == {"style": "SequenceParallel"}
        assert plan["model.layers.*.self_attn"]["desired_input_kwarg_layouts"] == {"hidden_states": "Replicate()"}
        assert plan["model.layers.*.mlp.experts"] == {"style": "ExpertsTensorParallel"}
        assert plan["model.layers.*.mlp"]["output_layouts"] == ["Partial()"]  # the experts' partial sums
        assert plan["model.layers.*.mlp"]["desired_output_layouts"] == ["Shard(1)"]  # reduce-scattered
        assert doc["mesh"] == {"dim_names": ["dp_replicate", "dp_shard", "tp"], "shape": [32, 1, 2]}  # zero=0

    def test_pipeline_stages(self):
        doc = json.loads(render("dtensor", LLAMA, 48, plan="tp=8,dp=2,pp=3", batch=96))
        pp = doc["pipeline"]
        assert doc["mesh"]["dim_names"][0] == "pp" and pp["schedule"] == "Schedule1F1B"
        assert [len(s["layers"]) for s in pp["stages"]] == [11, 11, 10]
        assert pp["split_points"] == ["model.layers.11", "model.layers.22"] and pp["microbatches"] == 48

    @pytest.mark.parametrize("graph, kw, words", [
        (LLAMA, dict(plan="tp=8,dp=8,zero=1"), "zero=1"),
        (MIXTRAL, dict(plan="tp=2,ep=8,sp=1", batch=256), "no PyTorch parallel style sends tokens"),
        (LLAMA, dict(plan="tp=4,cp=2,dp=8"), "give zero=3"),
        (str(ROOT / "tests" / "data" / "configs" / "qwen2-0.5b" / "config.json"), dict(plan="tp=2,pp=2,dp=16"),
         "ties its embedding and head"),
    ])
    def test_refusals(self, graph, kw, words):
        assert words in refused("dtensor", graph, 64, **kw)

    def test_the_apply_module_reads_it_without_torch(self):
        from exports.torch_apply import load

        plan = load(render("dtensor", LLAMA, 64, plan="tp=8,dp=4,pp=2", batch=512))
        assert plan.mesh_names == ("pp", "dp_replicate", "dp_shard", "tp") and plan.world_size == 64

    @pytest.mark.parametrize("edit, words", [
        (lambda d: d.update(format="pase-jax-shardings"), "not a pase-torch-plan document"),
        (lambda d: d.update(version=1), "version 1"),
        (lambda d: d["tensor_parallel"]["plan"]["lm_head"].update(style="Colwise"), "unknown style 'Colwise'"),
        (lambda d: d["tensor_parallel"]["plan"]["lm_head"].update(output_layouts="Shard(x)"), "is not a placement"),
        (lambda d: d["data_parallel"].update(shard=["fsdp"]), "mesh dimension 'fsdp' is not the mesh's"),
        (lambda d: d.pop("mesh"), "malformed"),
    ])
    def test_the_apply_module_refuses_a_bad_file(self, edit, words):
        from exports.torch_apply import PlanError, load

        doc = json.loads(render("dtensor", LLAMA, 64, plan="tp=8,dp=8,zero=3"))
        edit(doc)
        with pytest.raises(PlanError, match=words) as e:
            load(json.dumps(doc))
        assert "\n" not in str(e.value)

    def test_refuses_gpt2_tensor_parallelism_and_built_in_graphs(self, tmp_path):
        gpt2 = _config(tmp_path, "gpt2", SMALL_GPT2)
        assert "Conv1D" in refused("dtensor", gpt2, 8, plan="tp=2", batch=16, seq=16)
        assert json.loads(render("dtensor", gpt2, 8, plan="dp=8,zero=3", batch=16, seq=16))["data_parallel"]["fully_shard"][0] == \
            "transformer.h.0"
        assert "is no Hugging Face config" in refused("dtensor", "transformer", 8, plan="tp=2")

    @pytest.mark.parametrize("family", ["qwen3", "gemma2", "olmo2", "phi3", "deepseek_v3"])
    def test_refuses_a_family_whose_class_it_does_not_name(self, family):
        config = str(ROOT / "tests" / "data" / "families" / family / "config.json")
        message = refused("dtensor", config, 8, plan="dp=8,zero=3", batch=8, seq=64)
        assert f"not of {family}: export it with --export jax" in message


# -- JAX ------------------------------------------------------------------------------


class TestJaxDocument:
    def test_every_tensor_spec_realises_its_split(self):
        from graph import operators

        view = planned(LLAMA, 64, plan="tp=8,dp=8,zero=3", seq=4096)
        doc = json.loads(render("jax", LLAMA, 64, plan="tp=8,dp=8,zero=3", seq=4096))
        assert doc["mesh"] == {"axes": ["m0", "m1", "m2", "m3", "m4", "m5"], "shape": [2] * 6, "devices": 64}
        assert doc["graph"] == LLAMA and doc["params"]["seq"] == 4096
        ops = operators(view.graph)
        assert [o["name"] for o in doc["operators"]] == [op.name for op in ops]
        for op, o, d in zip(ops, doc["operators"], view.decisions):
            assert o["config"] == list(d.config) and o["options"] == dict(d.options)
            for t, entry in zip(op.inputs + op.outputs, o["inputs"] + o["outputs"]):
                assert entry["shape"] == list(t.shape) and len(entry["spec"]) == len(t.shape)
                for group, axes in zip(t.axes, entry["spec"]):
                    split = 1
                    for letter in group:
                        split *= d[letter]
                    names = [] if axes is None else [axes] if isinstance(axes, str) else axes
                    assert 2 ** len(names) == split, (op.name, t.axes, entry["spec"])
        qkv = next(o for o in doc["operators"] if o["name"] == "layer0/attn/qkv")
        assert [i["role"] for i in qkv["inputs"]] == ["activation", "weight"]
        assert qkv["inputs"][1]["spec"] == [None, ["m3", "m4", "m5"], None, None]
        assert qkv["options"] == {"zero": 3}

    def test_a_per_layer_plan_and_a_pipeline(self):
        doc = json.loads(render("jax", "alexnet", 8))  # the searched plan: no standard configuration
        assert doc["plan"] == "the plan found by the search"
        fc6 = next(o for o in doc["operators"] if o["name"] == "fc6")
        assert fc6["config"] == [1, 2, 4] and fc6["inputs"][1]["spec"] == [["m1", "m2"], "m0"]  # (k, n)
        doc = json.loads(render("jax", LLAMA, 64, plan="tp=8,dp=4,pp=2", batch=512))
        assert doc["stages"] == [{"first_device": 0, "devices": 32}, {"first_device": 32, "devices": 32}]
        stages = [o["stage"] for o in doc["operators"]]
        assert stages == sorted(stages) and stages[0] == 0 and stages[-1] == 1
        assert doc["params"]["batch"] == 4  # one micro-batch of the data-parallel groups

    def test_the_loader_reads_it_back(self):
        from exports.frameworks.jax_mesh import assign
        from exports.jax_loader import load

        view = planned("alexnet", 8)
        mp = load(render("jax", "alexnet", 8))
        direct = assign(view.graph, view.decisions, 8)
        assert mp.axes == direct.axes == (("m0", 2), ("m1", 2), ("m2", 2))
        assert mp.layers == direct.layers and mp.stages == ((0, 8),)

    @pytest.mark.parametrize("edit, words", [
        (lambda d: d.update(format="x"), "not a pase-jax-shardings document"),
        (lambda d: d.update(version=9), "version 9"),
        (lambda d: d["operators"][0]["inputs"][0].update(spec=["m7", None, None, None]), "conv1 input 0"),
        (lambda d: d["operators"][0]["inputs"][0].update(spec=[["m0", "m1"], "m0", None, None]), "two of its axes"),
        (lambda d: d.pop("mesh"), "malformed"),
    ])
    def test_the_loader_refuses_a_bad_file(self, edit, words):
        from exports.jax_loader import LoaderError, load

        doc = json.loads(render("jax", "alexnet", 8))
        edit(doc)
        with pytest.raises(LoaderError, match=words):
            load(doc)


# -- standard configurations in searched and evaluated plans -------------------------------


class TestRecognition:
    @pytest.mark.parametrize("graph, procs, spec, batch", [
        (LLAMA, 64, "tp=8,dp=8", 128), (LLAMA, 64, "tp=4,cp=2,dp=8,sp=1,recompute=full,zero=3", 128),
        (MIXTRAL, 64, "tp=2,ep=8,sp=1,zero=1", 256), ("transformer", 8, "tp=2,dp=4", 128),
        ("alexnet", 8, "dp=8", 128),
    ])
    def test_the_decisions_of_a_standard_configuration_give_it_back(self, graph, procs, spec, batch):
        from exports.frameworks.plans import recognise
        from models import build_graph
        from standard import complete, parse, strategy

        g = build_graph(graph, batch=batch)
        std = complete(parse(spec), procs, batch)
        assert recognise(g, strategy(g, std), procs, batch) == std

    def test_one_operator_off_is_no_standard_configuration(self):
        from config_space import Decision
        from exports.frameworks.plans import NotStandard, recognise
        from models import build_graph
        from standard import complete, parse, strategy

        g = build_graph(LLAMA, batch=128)
        decisions = strategy(g, complete(parse("tp=8,dp=8"), 64, 128))
        v = next(i for i, d in enumerate(decisions) if g.nodes[i]["op"].name == "layer3/mlp/down")
        d = decisions[v]
        decisions[v] = Decision(d.dims, tuple(64 if c == "b" else 1 for c in d.dims))
        with pytest.raises(NotStandard, match=r"layer3/mlp/down is \(b=64"):
            recognise(g, decisions, 64, 128)

    def test_a_searched_data_parallel_plan_exports(self, tmp_path):
        config = tmp_path / "llama" / "config.json"
        config.parent.mkdir()
        config.write_text(json.dumps(SMALL_LLAMA))
        view = planned(str(config), 8, batch=64, seq=64, bw=1000.0)
        assert view.result.mode == "search"
        cfg = tomllib.loads(render("torchtitan@0.2", str(config), 8, batch=64, seq=64, bw=1000.0))
        assert cfg["parallelism"]["data_parallel_replicate_degree"] == 8
        assert cfg["parallelism"]["tensor_parallel_degree"] == 1

    def test_a_searched_pipeline_exports(self, tmp_path):
        config = _config(tmp_path, "llama", {**SMALL_LLAMA, "num_hidden_layers": 4})
        view = planned(config, 8, batch=64, seq=16, pp="2", bw=1000.0)
        assert view.result.mode == "search" and view.pipeline is not None
        std = view.standard("megatron")
        assert (std.pp, std.dp, std.tp) == (2, 4, 1)
        args = megatron_args(render("megatron", config, 8, batch=64, seq=16, pp="2", bw=1000.0))
        assert flag_value(args, "--pipeline-model-parallel-size") == "2"
        doc = json.loads(render("dtensor", config, 8, batch=64, seq=16, pp="2", bw=1000.0))
        assert [s["layers"] for s in doc["pipeline"]["stages"]] == [[0, 1], [2, 3]]

    def test_a_pipeline_whose_stages_differ_is_refused(self, tmp_path):
        config = _config(tmp_path, "llama", {**SMALL_LLAMA, "num_hidden_layers": 4})
        words = refused("megatron", config, 8, batch=64, seq=16, pp="auto")
        assert "the plan is no standard configuration" in words

    @pytest.mark.parametrize("fmt", ["torchtitan", "megatron", "dtensor"])
    def test_a_searched_per_layer_plan_is_refused(self, fmt):
        words = refused(fmt, "transformer", 8, batch=16, seq=16, width=128, vocab=8192, layers=1)
        assert "the plan is no standard configuration: " in words and "--export jax" in words
        assert "not a transformer" in refused("dtensor", "alexnet", 8)


# -- the command line ------------------------------------------------------------------

SMALL_LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
               "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 256, "max_position_embeddings": 64}
SMALL_GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 64, "vocab_size": 256,
              "embd_pdrop": 0.0, "attn_pdrop": 0.0, "resid_pdrop": 0.0}


def _config(tmp_path, name: str, cfg: dict) -> str:
    path = tmp_path / name / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg))
    return str(path)


class TestCommandLine:
    def test_stdout_holds_the_export_alone(self, tmp_path):
        config = _config(tmp_path, "llama", SMALL_LLAMA)
        proc = run_cli("-g", config, "-p", "8", "-b", "16", "--seq", "16", "--plan", "tp=2", "--export",
                       "torchtitan@0.2", ok=False)
        assert proc.returncode == 0, proc.stderr
        cfg = tomllib.loads(proc.stdout)  # the whole of stdout is the TOML
        assert cfg["parallelism"]["tensor_parallel_degree"] == 2
        assert "Predicted step time" in proc.stderr and "Predicted step time" not in proc.stdout
        # FORMAT:- is stdout too, as the convention has it: no file named "-" is written where the user runs it
        dash = run_cli("-g", config, "-p", "8", "-b", "16", "--seq", "16", "--plan", "tp=2", "--export",
                       "torchtitan@0.2:-", ok=False, cwd=tmp_path)
        assert dash.returncode == 0 and dash.stdout == proc.stdout and not (tmp_path / "-").exists()

    def test_files_after_a_search_an_evaluation_and_a_plan(self, tmp_path):
        config = _config(tmp_path, "llama", SMALL_LLAMA)
        plan = tmp_path / "plan.json"
        run_cli("-g", config, "-p", "8", "-b", "16", "--seq", "16", "--plan", "tp=2,dp=4,sp=1", "--output", plan,
                "--export", f"megatron:{tmp_path / 'a.sh'}", "--export", f"jax:{tmp_path / 'a.json'}", "-q")
        assert "--sequence-parallel" in megatron_args((tmp_path / "a.sh").read_text())
        proc = run_cli("--evaluate", plan, "--export", f"torchtitan@0.2:{tmp_path / 'b.toml'}", "-q")
        assert "Predicted step time" in proc.stdout  # the report stays on stdout
        assert tomllib.loads((tmp_path / "b.toml").read_text())["parallelism"]["tensor_parallel_degree"] == 2
        run_cli("-g", "alexnet", "-p", "8", "--export", f"jax:{tmp_path / 'c.json'}", "-q")
        assert json.loads((tmp_path / "c.json").read_text())["plan"] == "the plan found by the search"

    def test_an_existing_file_is_replaced_only_by_a_run_that_succeeds(self, tmp_path):
        config = _config(tmp_path, "llama", SMALL_LLAMA)
        target = tmp_path / "job.toml"
        target.write_text("mine\n")
        target.chmod(0o640)
        proc = run_cli("-g", config, "-p", "8", "-b", "16", "--seq", "16", "--plan", "tp=2,zero=1",
                       "--export", f"torchtitan@0.2:{target}", ok=False)
        assert "zero=1" in one_line_error(proc)
        assert target.read_text() == "mine\n"  # refused: nothing written
        run_cli("-g", config, "-p", "8", "-b", "16", "--seq", "16", "--plan", "tp=2,zero=3",
                "--export", f"torchtitan@0.2:{target}", "-q")
        assert tomllib.loads(target.read_text())["parallelism"]["data_parallel_shard_degree"] == 4
        assert target.stat().st_mode & 0o777 == 0o640  # replaced as --output replaces: its permissions kept

    @pytest.mark.parametrize("args, words", [
        (["--export", "tensorflow"],
         "unknown format 'tensorflow' (the formats are torchtitan, torchtitan@0.2, megatron, jax, dtensor)"),
        (["--export", "jax:"], "the path after ':' is empty"),
        (["--export", "jax", "--export", "dtensor"], "would all go to stdout"),
        (["-p", "8,16", "--export", "jax:x.json"], "cannot be used with a sweep"),
        (["--export", "jax:{tmp}", "--output", "{tmp}/p.json"], "is a directory"),
        (["--export", "jax:{tmp}/p.json", "--output", "{tmp}/p.json"], "is also where --output writes"),
        (["--export", "jax:{tmp}/missing/p.json"], "does not exist"),
    ])
    def test_refused_before_any_work(self, tmp_path, args, words):
        args = [a.replace("{tmp}", str(tmp_path)) for a in args]
        before = sorted(tmp_path.iterdir())
        proc = run_cli("-g", "alexnet", *(["-p", "8"] if "-p" not in args else []), *args, ok=False)
        assert words in one_line_error(proc)
        assert sorted(tmp_path.iterdir()) == before

    @pytest.mark.parametrize("fmt", ["torchtitan", "dtensor"])
    def test_a_built_in_graph_is_refused_in_one_line_and_nothing_written(self, tmp_path, fmt):
        proc = run_cli("-g", "transformer", "-p", "8", "--plan", "tp=2", "--export", f"{fmt}:{tmp_path / 'x'}", ok=False)
        assert "is no Hugging Face config" in one_line_error(proc)
        assert list(tmp_path.iterdir()) == []

    def test_help_names_the_flag(self):
        assert "--export FORMAT[:PATH]" in run_cli("--help").stdout

    def test_a_run_without_it_imports_none_of_it(self):
        assert modules_loaded_by_a_plain_run("exports.frameworks", "exports.frameworks.plans") == [False, False]

    def test_the_exports_do_not_depend_on_the_hash_seed(self):
        code = ("from exports.frameworks import FRAMEWORKS\n"
                "from exports.frameworks.plans import PlanView\n"
                "from planner import plan\n"
                "from settings import Settings\n"
                f"p = plan(Settings(graph={LLAMA!r}, procs=8, batch=16, seq=64, plan='tp=2,dp=4,sp=1,zero=3'))\n"
                "v = PlanView(p.settings, p.graph, p.result)\n"
                "print(*(FRAMEWORKS[f].render(v) for f in FRAMEWORKS))\n")
        outputs = outputs_under_hash_seeds(code)
        assert len(outputs) == 1 and '"model.layers.*.self_attn.q_proj"' in outputs.pop()


def test_gpu_step_without_a_gpu_says_so(tmp_path):
    """benchmarks/gpu_step.py: with no GPU (or no jax) there is nothing to measure: exit 0 and say why."""
    config = _config(tmp_path, "llama", SMALL_LLAMA)
    plan = tmp_path / "plan.json"
    run_cli("-g", config, "-p", "8", "-b", "16", "--seq", "16", "--plan", "tp=2", "--export", f"jax:{plan}", "-q")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_step.py"), str(plan)],
                          capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin",
                                                                             "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stderr
    assert ("no GPU" in proc.stdout) or ("jax is not installed" in proc.stdout)
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_step.py"), str(config)],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "not a plan written by scheduler.py --export jax" in bad.stderr


# -- the exported JAX shardings, run --------------------------------------------------------


@pytest.mark.skipif(not HAVE_JAX, reason="jax is not installed (pip install -r benchmarks/jax/requirements.txt)")
def test_exported_shardings_run_on_xla_with_the_charged_collectives(tmp_path):
    """GPT-2 and Llama (2 layers, width 64) and the built-in Transformer,
    exported and run on 8 CPU devices by benchmarks/jax_validate.py: the
    sharded step's loss and gradients equal the unsharded model's, and
    every matrix-product layer's collectives are the cost model's."""
    llama = _config(tmp_path, "llama", SMALL_LLAMA)
    gpt2 = _config(tmp_path, "gpt2", {**SMALL_GPT2, "tie_word_embeddings": True})
    runs = {"llama_tp2": [llama, "--plan", "tp=2,dp=4"], "gpt2_tp4": [gpt2, "--plan", "tp=4,dp=2"],
            "transformer": ["transformer", "-m", "128", "--vocab", "4096", "--layers", "1"]}
    files = []
    for name, (graph, *more) in runs.items():
        path = tmp_path / f"{name}.json"
        run_cli("-g", graph, "-p", "8", "-b", "16", "--seq", "16", *more, "--export", f"jax:{path}", "-q")
        files += ["--sharding", str(path)]
    doc = json.loads((tmp_path / "transformer.json").read_text())
    assert doc["plan"] == "the plan found by the search"
    assert {tuple(o["config"]) for o in doc["operators"]} != {(8,) + (1,) * (len(o["config"]) - 1)
                                                              for o in doc["operators"]}  # not plain data parallel
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "jax_validate.py"), *files],
                          capture_output=True, text=True, timeout=300)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr[-3000:]
    assert out.count("numerics: PASS") == 3
    assert out.count("must agree: all do") == 3
    assert out.count("re-distribution: PASS") == 3
    table = {line.split()[0]: line for line in out.splitlines() if line.startswith("layer0/attn/qkv ")}
    assert table  # the rows: the cost model's collectives beside XLA's
    for line in out.splitlines():
        if line.startswith(("layer0/attn/qkv ", "layer1/mlp/down ", "logits ")):
            assert line.rstrip().endswith("yes"), line
    # Llama's column-parallel projection: the input gradient all-reduced over tp, the weight gradient over dp
    assert any(line.startswith("layer0/attn/qkv ") and "Einsum 1 all-reduce of 2, 1 all-reduce of 4 1 all-reduce of 2, "
               "1 all-reduce of 4 yes" in " ".join(line.split()) for line in out.splitlines())
