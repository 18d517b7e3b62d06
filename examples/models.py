"""Large-kernel CNNs in Flax linen, with the depthwise convolution injectable.

Each model takes `dwconv`, a constructor with the signature of
`jax_flashdwc.nn.DepthwiseConv2D(features, kernel_size, padding=..., name=...)`.
`FLAX_DWCONV` builds the same layer from `flax.linen.Conv(feature_group_count=C)`
(identical parameters), so one model runs with either and checkpoints swap.

These follow the published architectures' shapes (stage widths, depths, kernel
sizes), without stochastic depth. Every model is called as `model(x, train)`.

Normalization as published: ConvNeXt uses LayerNorm; RepLKNet-31B and SLaK-T
use BatchNorm, whose running statistics live in the "batch_stats" collection
(`model.apply(variables, x, train=True, mutable=["batch_stats"])` while training);
ConvMixer keeps LayerNorm in place of its BatchNorm.

Where a BatchNorm and its activation come right before a depthwise conv (in
RepLKNet: after the 1x1 conv that feeds the large kernel, and in the stem and the
transitions), the models hand the norm to the conv's fused input prologue instead
of writing the normalized tensor: `FoldedBatchNorm` returns the per-channel
(scale, shift) and the conv applies `act(x * scale + shift)` as it reads x. This
is not the inference-time folding of running statistics into constants: while
training, the scale and shift are computed from the current batch's mean and
variance, in the step, and are differentiated through (they depend on x), so the
gradient is that of BatchNorm with batch statistics, and the running averages
are updated as flax's BatchNorm updates them. In evaluation the same module folds
the running averages. The variable names equal nn.BatchNorm's, so the
checkpoints are interchangeable with an unfused model. A BatchNorm *after* a
depthwise conv (SLaK's branches, RepLKNet's kernels) needs that conv's output
statistics first, so it stays an ordinary BatchNorm (XLA fuses its affine into
the branch sum that follows).

SLaK-T is dense here: its sparse training (40% of the large-kernel weights) is
not implemented, so at the published 1.3x width it has more weights and FLOPs
than the sparse original.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
from flax import linen as nn

from jax_flashdwc.nn import DepthwiseConv2D, fold_batch_norm

ModuleDef = Callable[..., nn.Module]


def FLAX_DWCONV(features, kernel_size, name=None, **kwargs):
  """flax's own depthwise conv, with DepthwiseConv2D's signature."""
  return nn.Conv(features, tuple(kernel_size), feature_group_count=features, name=name, **kwargs)


def _same(kernel_size):
  return tuple((k - 1) // 2 for k in kernel_size)


def _pad(kernel_size):
  return tuple((p, p) for p in _same(kernel_size))


# The running averages keep 0.9 of their value a step: PyTorch's momentum=0.1, with
# which RepLKNet and SLaK were trained (flax's own default, 0.99, would leave them
# near their initial values for the first thousand steps).
BN_MOMENTUM = 0.9

ACTIVATIONS = {"relu": nn.relu, "gelu": lambda x: nn.gelu(x, approximate=False), None: lambda x: x}


class FoldedBatchNorm(nn.Module):
  """BatchNorm over (N, H, W) returned as the per-channel (scale, shift) it applies.

  `x * scale + shift` equals `nn.BatchNorm(...)(x)` with the same variables
  ("scale", "bias" in params; "mean", "var" in batch_stats). With
  use_running_average=False the statistics are the batch's (float32, E[x^2] -
  E[x]^2 as flax computes them, over the global batch under data parallelism) and
  the running averages are updated; scale and shift are functions of x, so
  gradients flow through the statistics as they do through a BatchNorm.
  """

  use_running_average: bool
  momentum: float = BN_MOMENTUM
  epsilon: float = 1e-5

  @nn.compact
  def __call__(self, x):
    features = x.shape[-1]
    scale = self.param("scale", nn.initializers.ones, (features,))
    bias = self.param("bias", nn.initializers.zeros, (features,))
    ra_mean = self.variable("batch_stats", "mean", lambda: jnp.zeros((features,), jnp.float32))
    ra_var = self.variable("batch_stats", "var", lambda: jnp.ones((features,), jnp.float32))
    if self.use_running_average:
      mean, var = ra_mean.value, ra_var.value
    else:
      axes = tuple(range(x.ndim - 1))
      xf = x.astype(jnp.float32)
      mean = jnp.mean(xf, axes)
      var = jnp.maximum(jnp.mean(jnp.square(xf), axes) - jnp.square(mean), 0.0)
      if not self.is_initializing():
        ra_mean.value = self.momentum * ra_mean.value + (1 - self.momentum) * jax.lax.stop_gradient(mean)
        ra_var.value = self.momentum * ra_var.value + (1 - self.momentum) * jax.lax.stop_gradient(var)
    return fold_batch_norm(mean, var, scale, bias, self.epsilon)


def fuses_prologue(dwconv) -> bool:
  """Whether a dwconv constructor takes (x, input_scale, input_shift) and input_activation."""
  return isinstance(dwconv, type) and issubclass(dwconv, DepthwiseConv2D)


class BNActDWConvs(nn.Module):
  """act(BatchNorm(x)) fed to one or more depthwise convs (bias-free), their outputs
  listed. With the library's layer the norm and activation run in each conv's
  input prologue; with any other conv they are computed here first."""

  kernels: Sequence[Sequence[int]]
  names: Sequence[str]
  activation: str = "relu"
  strides: int = 1
  dwconv: ModuleDef = DepthwiseConv2D
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x, train: bool = False):
    scale, shift = FoldedBatchNorm(not train, name="bn")(x)
    features = x.shape[-1]
    if fuses_prologue(self.dwconv):
      return [self.dwconv(features, tuple(k), strides=self.strides, padding=_pad(k), use_bias=False,
                          input_activation=self.activation, dtype=self.dtype, name=name)(x, scale, shift)
              for k, name in zip(self.kernels, self.names)]
    h = ACTIVATIONS[self.activation](x.astype(jnp.float32) * scale + shift).astype(self.dtype)
    kwargs = {"strides": self.strides} if self.strides != 1 else {}
    return [self.dwconv(features, tuple(k), padding=_pad(k), use_bias=False, dtype=self.dtype, name=name,
                        **kwargs)(h)
            for k, name in zip(self.kernels, self.names)]


class ConvNeXtBlock(nn.Module):
  """ConvNeXt block: depthwise conv, LayerNorm, 4x MLP, layer scale, residual.

  `kernels` lists the depthwise branches, summed: [(7, 7)] for ConvNeXt; SLaK's
  sparse-large-kernel block without the sparsity is [(k, 5), (5, k), (5, 5)].
  """

  dim: int
  kernels: Sequence[Sequence[int]] = ((7, 7),)
  dwconv: ModuleDef = DepthwiseConv2D
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x, train: bool = False):
    h = sum(self.dwconv(self.dim, tuple(k), padding=_pad(k), dtype=self.dtype,
                        name="dwconv" if len(self.kernels) == 1 else f"dw_{k[0]}x{k[1]}")(x)
            for k in self.kernels)
    h = nn.LayerNorm(dtype=self.dtype, name="norm")(h)
    h = nn.Dense(4 * self.dim, dtype=self.dtype, name="pwconv1")(h)
    h = nn.Dense(self.dim, dtype=self.dtype, name="pwconv2")(nn.gelu(h))
    gamma = self.param("gamma", nn.initializers.constant(1e-6), (self.dim,))
    return x + gamma * h


class StagedNet(nn.Module):
  """A ConvNeXt-style hierarchy: 4x4 patch stem, stages joined by 2x2 stride-2 convs."""

  dims: Sequence[int]
  depths: Sequence[int]
  block: Callable[[int, int], nn.Module]
  num_classes: int = 1000
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x, train: bool = False):
    x = x.astype(self.dtype)
    for i, (dim, depth) in enumerate(zip(self.dims, self.depths)):
      if i == 0:
        x = nn.Conv(dim, (4, 4), strides=4, dtype=self.dtype, name="stem")(x)
        x = nn.LayerNorm(dtype=self.dtype, name="stem_norm")(x)
      else:
        x = nn.LayerNorm(dtype=self.dtype, name=f"down{i}_norm")(x)
        x = nn.Conv(dim, (2, 2), strides=2, dtype=self.dtype, name=f"down{i}")(x)
      for j in range(depth):
        x = self.block(dim, i)(x, train)
    x = nn.LayerNorm(dtype=self.dtype, name="head_norm")(jnp.mean(x, axis=(1, 2)))
    return nn.Dense(self.num_classes, dtype=jnp.float32, name="head")(x)


def ConvNeXt(dims=(96, 192, 384, 768), depths=(3, 3, 9, 3), kernel_size=7, dwconv=DepthwiseConv2D,
             num_classes=1000, dtype=jnp.float32):
  block = lambda dim, stage: ConvNeXtBlock(dim, ((kernel_size, kernel_size),), dwconv, dtype)
  return StagedNet(dims, depths, block, num_classes, dtype)


class SLaKBlock(nn.Module):
  """SLaK block: the sum of a (k, 5), a (5, k) and a 5x5 depthwise conv, each
  followed by its BatchNorm (the decomposed large kernel), then ConvNeXt's
  LayerNorm, 4x MLP, layer scale and residual."""

  dim: int
  kernel: int
  dwconv: ModuleDef = DepthwiseConv2D
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x, train: bool = False):
    h = 0
    for k in ((self.kernel, 5), (5, self.kernel), (5, 5)):
      name = f"dw_{k[0]}x{k[1]}"
      branch = self.dwconv(self.dim, k, padding=_pad(k), use_bias=False, dtype=self.dtype, name=name)(x)
      h = h + nn.BatchNorm(use_running_average=not train, momentum=BN_MOMENTUM, dtype=self.dtype, name=f"{name}_bn")(branch)
    h = nn.LayerNorm(dtype=self.dtype, name="norm")(h)
    h = nn.Dense(4 * self.dim, dtype=self.dtype, name="pwconv1")(h)
    h = nn.Dense(self.dim, dtype=self.dtype, name="pwconv2")(nn.gelu(h))
    gamma = self.param("gamma", nn.initializers.constant(1e-6), (self.dim,))
    return x + gamma * h


def SLaK(dims=(124, 249, 499, 998), depths=(3, 3, 9, 3), kernels=(51, 49, 47, 13), dwconv=DepthwiseConv2D,
         num_classes=1000, dtype=jnp.float32):
  """SLaK on ConvNeXt's layout; the default dims are SLaK-T's (ConvNeXt-T's x 1.3, truncated)."""
  block = lambda dim, stage: SLaKBlock(dim, kernels[stage], dwconv, dtype)
  return StagedNet(dims, depths, block, num_classes, dtype)


class RepLKBlock(nn.Module):
  """RepLKNet's RepLKBlock then its ConvFFN, with BatchNorm as published.

  RepLKBlock: BN, 1x1 conv, BN + ReLU, then a k x k and a parallel 5x5 depthwise
  conv (each with its BN) summed, ReLU, 1x1 conv, BN, residual. The BN + ReLU after
  the first 1x1 conv feeds both depthwise convs: it runs in their prologue.
  ConvFFN: BN, 1x1 conv to 4x, BN, GELU, 1x1 conv back, BN, residual.
  """

  dim: int
  kernel: int
  small_kernel: int = 5
  dwconv: ModuleDef = DepthwiseConv2D
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x, train: bool = False):
    def bn(name):
      return nn.BatchNorm(use_running_average=not train, momentum=BN_MOMENTUM, dtype=self.dtype, name=name)

    def pw(features, name):
      return nn.Dense(features, use_bias=False, dtype=self.dtype, name=name)

    h = pw(self.dim, "pw1")(bn("prelkb_bn")(x))
    kernels = ((self.kernel, self.kernel), (self.small_kernel, self.small_kernel))
    large, small = BNActDWConvs(kernels, ("large_kernel", "small_kernel"), "relu", dwconv=self.dwconv,
                                dtype=self.dtype, name="pw1_bn_relu")(h, train)
    h = nn.relu(bn("large_kernel_bn")(large) + bn("small_kernel_bn")(small))
    x = x + bn("pw2_bn")(pw(self.dim, "pw2")(h))
    h = bn("ffn_pw1_bn")(pw(4 * self.dim, "ffn_pw1")(bn("preffn_bn")(x)))
    h = nn.gelu(h, approximate=False)
    return x + bn("ffn_pw2_bn")(pw(self.dim, "ffn_pw2")(h))


class RepLKNet(nn.Module):
  """RepLKNet: a stem of four conv-BN-ReLU (3x3 stride 2, depthwise 3x3, 1x1, depthwise
  3x3 stride 2), stages of RepLKBlock + ConvFFN joined by transitions (1x1 conv-BN-ReLU,
  depthwise 3x3 stride 2-BN-ReLU), a final BN, global pooling and a linear head.
  Every BN + ReLU that precedes a depthwise conv runs in that conv's prologue."""

  dims: Sequence[int] = (128, 256, 512, 1024)
  depths: Sequence[int] = (2, 2, 18, 2)
  kernels: Sequence[int] = (31, 29, 27, 13)
  num_classes: int = 1000
  dwconv: ModuleDef = DepthwiseConv2D
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x, train: bool = False):
    def bn_relu(name, h):
      return nn.relu(nn.BatchNorm(use_running_average=not train, momentum=BN_MOMENTUM, dtype=self.dtype, name=name)(h))

    def dw3x3(name, h, strides):  # act(BN(h)) of the layer before, then a depthwise 3x3
      (out,) = BNActDWConvs(((3, 3),), ("dwconv",), "relu", strides, self.dwconv, self.dtype, name=name)(h, train)
      return out

    x = x.astype(self.dtype)
    width = self.dims[0]
    x = nn.Conv(width, (3, 3), strides=2, padding=((1, 1), (1, 1)), use_bias=False, dtype=self.dtype,
                name="stem0")(x)
    x = bn_relu("stem1_bn", dw3x3("stem1", x, 1))
    x = nn.Dense(width, use_bias=False, dtype=self.dtype, name="stem2")(x)
    x = bn_relu("stem3_bn", dw3x3("stem3", x, 2))
    for i, (dim, depth) in enumerate(zip(self.dims, self.depths)):
      if i > 0:
        x = nn.Dense(dim, use_bias=False, dtype=self.dtype, name=f"transition{i}_pw")(x)
        x = bn_relu(f"transition{i}_bn", dw3x3(f"transition{i}_dw", x, 2))
      for j in range(depth):
        x = RepLKBlock(dim, self.kernels[i], dwconv=self.dwconv, dtype=self.dtype, name=f"stage{i}_block{j}")(x, train)
    x = nn.BatchNorm(use_running_average=not train, momentum=BN_MOMENTUM, dtype=self.dtype, name="head_bn")(x)
    return nn.Dense(self.num_classes, dtype=jnp.float32, name="head")(jnp.mean(x, axis=(1, 2)))


def RepLKNet31B(dims=(128, 256, 512, 1024), depths=(2, 2, 18, 2), kernels=(31, 29, 27, 13),
                dwconv=DepthwiseConv2D, num_classes=1000, dtype=jnp.float32):
  return RepLKNet(dims, depths, kernels, num_classes, dwconv, dtype)


class ConvMixer(nn.Module):
  """ConvMixer: patch embedding, then depth x (residual depthwise k x k, pointwise)."""

  dim: int = 1536
  depth: int = 20
  kernel_size: int = 9
  patch_size: int = 7
  num_classes: int = 1000
  dwconv: ModuleDef = DepthwiseConv2D
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x, train: bool = False):
    x = x.astype(self.dtype)
    x = nn.Conv(self.dim, (self.patch_size,) * 2, strides=self.patch_size, dtype=self.dtype, name="stem")(x)
    x = nn.LayerNorm(dtype=self.dtype, name="stem_norm")(nn.gelu(x))
    k = (self.kernel_size,) * 2
    for i in range(self.depth):
      h = self.dwconv(self.dim, k, padding=tuple((p, p) for p in _same(k)), dtype=self.dtype, name=f"dw{i}")(x)
      x = x + nn.LayerNorm(dtype=self.dtype, name=f"dw{i}_norm")(nn.gelu(h))
      x = nn.LayerNorm(dtype=self.dtype, name=f"pw{i}_norm")(nn.gelu(nn.Dense(self.dim, dtype=self.dtype,
                                                                              name=f"pw{i}")(x)))
    return nn.Dense(self.num_classes, dtype=jnp.float32, name="head")(jnp.mean(x, axis=(1, 2)))


# name -> constructor(dwconv, num_classes, dtype)
MODELS = {
    "convnext_t": lambda dwconv, n, dtype: ConvNeXt(dwconv=dwconv, num_classes=n, dtype=dtype),
    "convmixer_1536_20": lambda dwconv, n, dtype: ConvMixer(dwconv=dwconv, num_classes=n, dtype=dtype),
    "replknet31b": lambda dwconv, n, dtype: RepLKNet31B(dwconv=dwconv, num_classes=n, dtype=dtype),
    "slak_t": lambda dwconv, n, dtype: SLaK(dwconv=dwconv, num_classes=n, dtype=dtype),
    # Reduced models for CPU runs, the tests and the convergence check.
    "convnext_micro": lambda dwconv, n, dtype: ConvNeXt(dims=(24, 48, 96, 192), depths=(1, 1, 2, 1),
                                                        dwconv=dwconv, num_classes=n, dtype=dtype),
    "replknet_micro": lambda dwconv, n, dtype: RepLKNet31B(dims=(16, 32, 64, 128), depths=(1, 1, 1, 1),
                                                           kernels=(13, 11, 9, 7), dwconv=dwconv,
                                                           num_classes=n, dtype=dtype),
    "slak_micro": lambda dwconv, n, dtype: SLaK(dims=(24, 48, 96, 192), depths=(1, 1, 1, 1), kernels=(13, 11, 9, 7),
                                                dwconv=dwconv, num_classes=n, dtype=dtype),
}
DWCONVS = {"flashdwc": DepthwiseConv2D, "flax": FLAX_DWCONV}
