"""The built-in sequence models of the PaSE paper: an LSTM language model
(RNNLM) and the Transformer (Vaswani et al., 2017), in the original tool's
operator order.  Their cutoff is 1: any divisor of a dimension may split it.
Kinds are imported by the builders, so that listing the models stays light.
"""

from __future__ import annotations

from errors import SettingError
from models.registry import ATTENTION_KINDS, BATCH, MAX_LAYERS, Param, model

HEAD_WIDTH = 64  # Transformer key width per head: heads = width / 64


@model("rnnlm", cutoff=1, expert="gnmt", description="LSTM language model (2 layers, vocabulary 100000)",
       params=(BATCH, Param("width", 2048, "hidden units"), Param("seq", 256, "sequence length"),
               Param("vocab", 100000, "vocabulary size"), Param("layers", 2, "LSTM layers")))
def rnnlm(B, batch, width, seq, vocab, layers):
    from kinds.gemm import FC, Embedding
    from kinds.pointwise import SoftmaxCrossEntropy
    from kinds.recurrent import LSTM

    ids = B.data((batch, seq), "bs")
    x = B.add("embed", Embedding(vocab, width), ids)
    x = B.add("lstm", LSTM(width, layers), x)
    x = B.add("logits", FC(vocab), x)
    B.add("softmax", SoftmaxCrossEntropy(), x)


def _check_transformer(values):
    width = values["width"]
    if width % HEAD_WIDTH:
        raise SettingError("width", f"{width} is not a multiple of the head width {HEAD_WIDTH} "
                                    f"(heads = width / {HEAD_WIDTH}); try "
                                    f"{max(HEAD_WIDTH, width // HEAD_WIDTH * HEAD_WIDTH)}")


@model("transformer", cutoff=1, expert="mesh_tensorflow", model_dims="vfh", check=_check_transformer,
       roles={"seq": "l", "tensor": "hfv"},
       description="Transformer encoder-decoder (6 + 6 layers, vocabulary 50000)",
       params=(BATCH, Param("width", 512, "embedding width (heads = width/64, feed-forward 4 x width)"),
               Param("seq", 256, "sequence length"), Param("vocab", 50000, "vocabulary size"),
               Param("layers", 6, "encoder layers (and as many decoder layers)", high=MAX_LAYERS),
               Param("attention", "materialized", "materialized (the paper's scores, softmax and context) or fused "
                     "(one operator)", choices=ATTENTION_KINDS)))
def transformer(B, batch, width, seq, vocab, layers, attention):
    from kinds.attention import FusedAttention
    from kinds.gemm import Einsum, Embedding
    from kinds.pointwise import Elementwise, Norm, Softmax, SoftmaxCrossEntropy
    from kinds.shape import Stack, Unstack

    e, k = width, HEAD_WIDTH
    h, f = width // k, 4 * width

    def multi_head(pre, xs, causal=False):
        w_qkv = B.weight((3, h, e, k), "shek")
        if len(xs) == 3:
            st = B.add(f"{pre}/stack", Stack("s"), *xs)
            qkv = B.add(f"{pre}/qkv", Einsum("sble,shek->sbhlk"), st, w_qkv)
        else:
            qkv = B.add(f"{pre}/qkv", Einsum("ble,shek->sbhlk"), xs[0], w_qkv)
        q, kk, v = B.add(f"{pre}/split", Unstack(), qkv)
        if attention == "fused":
            c = B.add(f"{pre}/attention", FusedAttention(causal=causal, letter="m"), q, kk, v)
        else:
            s = B.add(f"{pre}/scores", Einsum("bhlk,bhmk->bhlm"), q, kk._replace(letters="bhmk"))
            s = B.add(f"{pre}/softmax", Softmax(3), s)
            c = B.add(f"{pre}/context", Einsum("bhlm,bhmk->bhlk"), s, v._replace(letters="bhmk"))
        o = B.add(f"{pre}/out", Einsum("bhlk,hek->ble"), c, B.weight((h, e, k), "hek"))
        o = B.add(f"{pre}/residual", Elementwise(), xs[0], o)
        return B.add(f"{pre}/norm", Norm(-1), o)

    def feed_forward(pre, x):
        y = B.add(f"{pre}/in", Einsum("ble,ef->blf", pw=2), x, B.weight((e, f), "ef"))
        y = B.add(f"{pre}/out", Einsum("blf,fe->ble"), y, B.weight((f, e), "fe"))
        y = B.add(f"{pre}/residual", Elementwise(), x, y)
        return B.add(f"{pre}/norm", Norm(-1), y)

    pos = B.data((batch, seq, e), "ble")  # the positional encoding
    x = B.add("enc/embed", Embedding(vocab, e, "e"), B.data((batch, seq), "bl"))
    x = B.add("enc/pos", Elementwise(), x, pos)
    for i in range(layers):
        x = feed_forward(f"enc{i}/ffn", multi_head(f"enc{i}/attn", [x]))
    enc = x
    x = B.add("dec/embed", Embedding(vocab, e, "e"), B.data((batch, seq), "bl"))
    x = B.add("dec/pos", Elementwise(), x, pos)
    for i in range(layers):
        a = multi_head(f"dec{i}/self", [x], causal=True)
        x = feed_forward(f"dec{i}/ffn", multi_head(f"dec{i}/cross", [a, enc, enc]))
    x = B.add("logits", Einsum("ble,ev->blv"), x, B.weight((e, vocab), "ev"))
    B.add("softmax", SoftmaxCrossEntropy(), x)
