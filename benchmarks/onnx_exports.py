"""Write the ONNX exports of small Hugging Face decoders in tests/data/onnx/.

GPT-2 and Llama, built from config values with random weights (2 layers,
width 64, 4 heads, vocabulary 1000, feed-forward 256; Llama also with
grouped-query attention, 2 key/value heads), exported by PyTorch's
two exporters, TorchScript (``torch.onnx.export(..., dynamo=False)``) and
dynamo (``dynamo=True``, the default since PyTorch 2.5; at its default
opset, and at opset 23), with the batch and the sequence as dynamic axes of
the inputs ``input_ids`` and ``attention_mask``, and the output ``logits``.
The weights are drawn at random, every tensor distinct (an exporter merges
equal constants and drops zero biases, which would change the parameters
the file shows).  They are then stripped: every floating-point tensor of the file
of more than ``KEEP`` elements is turned into external data in a file that
is not written (its shape stays; the importer never reads weights, and
``onnx.load(path, load_external_data=False)`` reads the rest).  Each file
records the versions that made it in its metadata (``exported_with``), and
the same config values are written beside the files as ``<family>.json``
(the keys a Hugging Face ``config.json`` uses).

It needs torch, transformers, onnx and onnxscript, which the project's own
requirements leave out; in a separate environment:

    python3 -m venv /tmp/torchenv
    /tmp/torchenv/bin/pip install torch --index-url https://download.pytorch.org/whl/cpu
    /tmp/torchenv/bin/pip install transformers onnx onnxscript
    /tmp/torchenv/bin/python benchmarks/onnx_exports.py      # writes tests/data/onnx/

Without them it says so and exits with status 0, writing nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "onnx"
KEEP = 256  # floating-point tensors of more elements are stripped (weights); smaller ones stay (rotary frequencies)
NEEDS = ("torch", "transformers", "onnx", "onnxscript")

#: the config values of each family (the keys of its Hugging Face config.json)
CONFIGS = {
    "gpt2": {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_inner": 256, "vocab_size": 1000,
             "n_positions": 128, "activation_function": "gelu_new", "tie_word_embeddings": True, "bos_token_id": 0,
             "eos_token_id": 0},
    "llama": {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 4, "intermediate_size": 256, "vocab_size": 1000,
              "max_position_embeddings": 128, "tie_word_embeddings": False, "hidden_act": "silu"},
}
CONFIGS["llama-gqa"] = dict(CONFIGS["llama"], num_key_value_heads=2)  # grouped-query attention: 2 heads per group
#: file name suffix -> (dynamo, opset): dynamo=False is the TorchScript exporter; at opset 23 dynamo writes the
#: Attention, RMSNormalization and RotaryEmbedding operators, below it their parts
EXPORTERS = {"torchscript": (False, 17), "dynamo": (True, None), "dynamo-opset23": (True, 23)}
INPUTS = ["input_ids", "attention_mask"]


def versions() -> dict[str, str]:
    import onnx
    import onnxscript
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__, "onnx": onnx.__version__,
            "onnxscript": onnxscript.__version__}


def build(family: str):
    """The model with random weights (seeded), in evaluation mode."""
    import torch
    import transformers

    torch.manual_seed(0)
    values = {k: v for k, v in CONFIGS[family].items() if k != "model_type"}
    if CONFIGS[family]["model_type"] == "gpt2":
        config = transformers.GPT2Config(**values)
        model = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.LlamaConfig(**values)
        model = transformers.LlamaForCausalLM(config)
    config.use_cache = False
    with torch.no_grad():  # every weight distinct and non-zero: an exporter merges equal constants, drops zero biases
        for p in model.parameters():
            p.normal_(0.0, 0.02)
    return model.eval()


class Logits:
    """The model's forward pass from ids to logits, nothing else."""

    def __new__(cls, model):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, input_ids, attention_mask):
                return self.inner(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                                  return_dict=True).logits

        return Wrapped(model).eval()


def export(family: str, exporter: str):
    """The exported ``onnx.ModelProto``, weights included."""
    import onnx
    import torch

    model = Logits(build(family))
    ids = torch.randint(0, CONFIGS[family]["vocab_size"], (2, 16), dtype=torch.int64)
    mask = torch.ones((2, 16), dtype=torch.int64)
    axes = {0: "batch", 1: "sequence"}
    buf = io.BytesIO()
    dynamo, opset = EXPORTERS[exporter]
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if not dynamo:
            torch.onnx.export(model, (ids, mask), buf, dynamo=False, input_names=INPUTS, output_names=["logits"],
                              dynamic_axes={"input_ids": axes, "attention_mask": axes, "logits": axes},
                              opset_version=opset)
            return onnx.load_model_from_string(buf.getvalue())
        batch, seq = torch.export.Dim("batch", min=1, max=1024), torch.export.Dim("sequence", min=2, max=128)
        extra = {} if opset is None else {"opset_version": opset}
        program = torch.onnx.export(model, (ids, mask), dynamo=True, input_names=INPUTS, output_names=["logits"],
                                    dynamic_shapes={k: {0: batch, 1: seq} for k in INPUTS}, verbose=False, **extra)
        program.save(buf)
        return onnx.load_model_from_string(buf.getvalue())


def strip(model, location: str) -> int:
    """Turn every floating-point tensor of more than ``KEEP`` elements
    (initializers and Constant nodes' values) into external data in
    ``location``, which is never written, and drop the exporter's notes on
    the nodes; the number of elements stripped."""
    import math

    from onnx import TensorProto, numpy_helper

    floats = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE}
    tensors = list(model.graph.initializer)
    for node in model.graph.node:
        tensors += [a.t for a in node.attribute if a.name == "value" and a.HasField("t")]
    stripped, offset = 0, 0
    for t in tensors:
        n = math.prod(t.dims)
        if t.data_type not in floats or n <= KEEP or t.data_location == TensorProto.EXTERNAL:
            continue
        size = numpy_helper.to_array(t).nbytes
        for field in ("raw_data", "float_data", "double_data", "int32_data"):
            t.ClearField(field)
        t.data_location = TensorProto.EXTERNAL
        del t.external_data[:]
        for key, value in (("location", location), ("offset", str(offset)), ("length", str(size))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        offset += size
        stripped += n
    for node in model.graph.node:  # the exporter's notes on each node (source lines, stack traces)
        del node.metadata_props[:]
        node.doc_string = ""
    return stripped


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT, help="folder to write (default tests/data/onnx)")
    args = ap.parse_args(argv)
    missing = [m for m in NEEDS if importlib.util.find_spec(m) is None]
    if missing:
        print(f"skipped: {', '.join(missing)} not installed (see this script's docstring)", file=sys.stderr)
        return 0
    import onnx

    made = versions()
    print("exported with " + ", ".join(f"{k} {v}" for k, v in made.items()), file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    for family, values in CONFIGS.items():
        (args.out / f"{family}.json").write_text(json.dumps(values, indent=2) + "\n", encoding="utf-8")
        for exporter in EXPORTERS:
            name = f"hf-{family}-{exporter}"
            model = export(family, exporter)
            stripped = strip(model, f"{name}.weights")
            entry = model.metadata_props.add()
            entry.key, entry.value = "exported_with", json.dumps(made, sort_keys=True)
            path = args.out / f"{name}.onnx"
            onnx.save(model, str(path))
            ops = sorted({n.op_type for n in model.graph.node})
            print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {os.path.getsize(path):,} bytes, "
                  f"{stripped:,} weight elements stripped, opset "
                  f"{next(o.version for o in model.opset_import if o.domain in ('', 'ai.onnx'))}, "
                  f"{len(model.graph.node)} nodes: {' '.join(ops)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
