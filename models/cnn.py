"""The built-in convolutional networks of the PaSE paper: AlexNet, ResNet-101
and Inception-v3, operator for operator in the original tool's order.

Shapes are NCHW; a convolution's filter is ``(out, in, r, s)``.  Beyond the
paper's operators, the graphs carry the trained parameters a real network
has, for the memory model and the parameter count (they change no cost):
AlexNet's biases, the batch normalisations' scale and shift, and the
classifiers' biases.  ResNet-101 then has torchvision's 44,549,160
parameters and Inception-v3 torchvision's 23,834,568 without the auxiliary
classifier.

Kinds are imported by the builders, so that listing the models stays light.
"""

from __future__ import annotations

from math import prod

from models.registry import BATCH, model

_CNN = dict(params=(BATCH,), cutoff=4, expert="one_weird_trick")


def _bn(B, name, x):
    """Batch normalisation: statistics over the batch (the original's axis 0),
    a scale and a shift per channel."""
    from kinds.pointwise import Norm

    return B.add(name, Norm(axis=0, param_axis=1), x)


@model("alexnet", description="AlexNet (one weird trick variant), 227x227 input, 1024 classes", **_CNN)
def alexnet(B, batch):
    from kinds.conv import Conv, Pooling
    from kinds.gemm import FC
    from kinds.pointwise import SoftmaxCrossEntropy

    x = B.data((batch, 3, 227, 227), "bchw")
    x = B.add("conv1", Conv(96, 11, stride=4, pw=1, bias=True), x)
    x = B.add("pool1", Pooling(3, stride=2), x)
    x = B.add("conv2", Conv(256, 5, pad=2, pw=1, bias=True), x)
    x = B.add("pool2", Pooling(3, stride=2), x)
    x = B.add("conv3", Conv(384, 3, pad=1, pw=1, bias=True), x)
    x = B.add("conv4", Conv(384, 3, pad=1, pw=1, bias=True), x)
    x = B.add("conv5", Conv(256, 3, pad=1, pw=1, bias=True), x)
    x = B.add("pool5", Pooling(3, stride=2), x)
    x = B.reshape("flatten", x, (batch, prod(x.shape[1:])), "bk")
    x = B.add("fc6", FC(4096, pw=1, bias=True), x)
    x = B.add("fc7", FC(4096, pw=1, bias=True), x)
    x = B.add("fc8", FC(1024, bias=True), x)
    B.add("softmax", SoftmaxCrossEntropy(), x)


@model("resnet101", description="ResNet-101, 227x227 input, 1000 classes", **_CNN)
def resnet101(B, batch):
    from kinds.conv import Conv, Pooling
    from kinds.gemm import FC
    from kinds.pointwise import Elementwise, ReduceMean, SoftmaxCrossEntropy

    x = B.data((batch, 3, 227, 227), "bchw")
    x = B.add("conv1", Conv(64, 7, stride=2, pad=3), x)
    x = _bn(B, "bn1", x)
    x = B.add("maxpool", Pooling(3, stride=2, pad=1), x)
    inplanes = 64
    for stage, (blocks, planes, stride) in enumerate([(3, 64, 1), (4, 128, 2), (23, 256, 2), (3, 512, 2)], start=1):
        for blk in range(blocks):
            s = stride if blk == 0 else 1
            pre = f"layer{stage}.{blk}"
            y = B.add(f"{pre}/conv1", Conv(planes, 1), x)
            y = _bn(B, f"{pre}/bn1", y)
            y = B.add(f"{pre}/conv2", Conv(planes, 3, stride=s, pad=1), y)
            y = _bn(B, f"{pre}/bn2", y)
            y = B.add(f"{pre}/conv3", Conv(4 * planes, 1), y)
            y = _bn(B, f"{pre}/bn3", y)
            identity = x
            if blk == 0 and (s != 1 or inplanes != 4 * planes):
                identity = B.add(f"{pre}/downsample/conv", Conv(4 * planes, 1, stride=s), x)
                identity = _bn(B, f"{pre}/downsample/bn", identity)
            x = B.add(f"{pre}/add", Elementwise(pw=1), y, identity)
            if blk == 0:
                inplanes = 4 * planes
    x = B.add("avgpool", ReduceMean((2, 3)), x)
    x = B.add("fc", FC(1000, bias=True), x)
    B.add("softmax", SoftmaxCrossEntropy(), x)


@model("inception3", description="Inception-v3, 299x299 input, 1000 classes", **_CNN)
def inception3(B, batch):
    from kinds.conv import Conv, Pooling
    from kinds.gemm import FC
    from kinds.pointwise import ReduceMean, SoftmaxCrossEntropy
    from kinds.shape import Concat

    def bc(name, x, n, rs, stride=1, pad=0):
        return _bn(B, f"{name}/bn", B.add(name, Conv(n, rs, stride=stride, pad=pad), x))

    def pool(name, x, stride, pad=0):
        return B.add(name, Pooling(3, stride=stride, pad=pad), x)

    def concat(name, xs):
        return B.add(name, Concat(1), *xs)

    def module_a(pre, x, pool_features):
        b1 = bc(f"{pre}/branch1x1", x, 64, 1)
        b5 = bc(f"{pre}/branch5x5_1", x, 48, 1)
        b5 = bc(f"{pre}/branch5x5_2", b5, 64, 5, pad=2)
        b3 = bc(f"{pre}/branch3x3dbl_1", x, 64, 1)
        b3 = bc(f"{pre}/branch3x3dbl_2", b3, 96, 3, pad=1)
        b3 = bc(f"{pre}/branch3x3dbl_3", b3, 96, 3, pad=1)
        bp = pool(f"{pre}/branch_pool/pool", x, 1, pad=1)
        bp = bc(f"{pre}/branch_pool", bp, pool_features, 1)
        return concat(f"{pre}/concat", [b1, b5, b3, bp])

    def module_b(pre, x):
        b3 = bc(f"{pre}/branch3x3", x, 384, 3, stride=2)
        bd = bc(f"{pre}/branch3x3dbl_1", x, 64, 1)
        bd = bc(f"{pre}/branch3x3dbl_2", bd, 96, 3, pad=1)
        bd = bc(f"{pre}/branch3x3dbl_3", bd, 96, 3, stride=2)
        bp = pool(f"{pre}/branch_pool", x, 2)
        return concat(f"{pre}/concat", [b3, bd, bp])

    def module_c(pre, x, c7):
        b1 = bc(f"{pre}/branch1x1", x, 192, 1)
        b7 = bc(f"{pre}/branch7x7_1", x, c7, 1)
        b7 = bc(f"{pre}/branch7x7_2", b7, c7, (1, 7), pad=(0, 3))
        b7 = bc(f"{pre}/branch7x7_3", b7, 192, (7, 1), pad=(3, 0))
        bd = bc(f"{pre}/branch7x7dbl_1", x, c7, 1)
        bd = bc(f"{pre}/branch7x7dbl_2", bd, c7, (7, 1), pad=(3, 0))
        bd = bc(f"{pre}/branch7x7dbl_3", bd, c7, (1, 7), pad=(0, 3))
        bd = bc(f"{pre}/branch7x7dbl_4", bd, c7, (7, 1), pad=(3, 0))
        bd = bc(f"{pre}/branch7x7dbl_5", bd, 192, (1, 7), pad=(0, 3))
        bp = pool(f"{pre}/branch_pool/pool", x, 1, pad=1)
        bp = bc(f"{pre}/branch_pool", bp, 192, 1)
        return concat(f"{pre}/concat", [b1, b7, bd, bp])

    def module_d(pre, x):
        b3 = bc(f"{pre}/branch3x3_1", x, 192, 1)
        b3 = bc(f"{pre}/branch3x3_2", b3, 320, 3, stride=2)
        b7 = bc(f"{pre}/branch7x7x3_1", x, 192, 1)
        b7 = bc(f"{pre}/branch7x7x3_2", b7, 192, (1, 7), pad=(0, 3))
        b7 = bc(f"{pre}/branch7x7x3_3", b7, 192, (7, 1), pad=(3, 0))
        b7 = bc(f"{pre}/branch7x7x3_4", b7, 192, 3, stride=2)
        bp = pool(f"{pre}/branch_pool", x, 2)
        return concat(f"{pre}/concat", [b3, b7, bp])

    def module_e(pre, x):
        b1 = bc(f"{pre}/branch1x1", x, 320, 1)
        b3 = bc(f"{pre}/branch3x3_1", x, 384, 1)
        b3a = bc(f"{pre}/branch3x3_2a", b3, 384, (1, 3), pad=(0, 1))
        b3b = bc(f"{pre}/branch3x3_2b", b3, 384, (3, 1), pad=(1, 0))
        b3 = concat(f"{pre}/branch3x3/concat", [b3a, b3b])
        bd = bc(f"{pre}/branch3x3dbl_1", x, 448, 1)
        bd = bc(f"{pre}/branch3x3dbl_2", bd, 384, 3, pad=1)
        bda = bc(f"{pre}/branch3x3dbl_3a", bd, 384, (1, 3), pad=(0, 1))
        bdb = bc(f"{pre}/branch3x3dbl_3b", bd, 384, (3, 1), pad=(1, 0))
        bd = concat(f"{pre}/branch3x3dbl/concat", [bda, bdb])
        bp = pool(f"{pre}/branch_pool/pool", x, 1, pad=1)
        bp = bc(f"{pre}/branch_pool", bp, 192, 1)
        return concat(f"{pre}/concat", [b1, b3, bd, bp])

    x = B.data((batch, 3, 299, 299), "bchw")
    x = bc("conv2d_1a_3x3", x, 32, 3, stride=2)
    x = bc("conv2d_2a_3x3", x, 32, 3)
    x = bc("conv2d_2b_3x3", x, 64, 3, pad=1)
    x = pool("maxpool1", x, 2)
    x = bc("conv2d_3b_1x1", x, 80, 1)
    x = bc("conv2d_4a_3x3", x, 192, 3)
    x = pool("maxpool2", x, 2)
    x = module_a("mixed_5b", x, 32)
    x = module_a("mixed_5c", x, 64)
    x = module_a("mixed_5d", x, 64)
    x = module_b("mixed_6a", x)
    for pre, c7 in (("mixed_6b", 128), ("mixed_6c", 160), ("mixed_6d", 160), ("mixed_6e", 192)):
        x = module_c(pre, x, c7)
    x = module_d("mixed_7a", x)
    x = module_e("mixed_7b", x)
    x = module_e("mixed_7c", x)
    x = B.add("avgpool", ReduceMean((2, 3)), x)
    x = B.add("fc", FC(1000, bias=True), x)
    B.add("softmax", SoftmaxCrossEntropy(), x)
