"""Large-kernel CNNs in Flax linen, with the depthwise convolution injectable.

Each model takes `dwconv`, a constructor with the signature of
`jax_flashdwc.nn.DepthwiseConv2D(features, kernel_size, padding=..., name=...)`.
`FLAX_DWCONV` builds the same layer from `flax.linen.Conv(feature_group_count=C)`
(identical parameters), so one model runs with either and checkpoints swap.

These follow the published architectures' shapes (stage widths, depths, kernel
sizes) with two simplifications, for all models alike: LayerNorm stands in for
BatchNorm (no batch statistics to carry through training), and no stochastic depth.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax.numpy as jnp
from flax import linen as nn

from jax_flashdwc.nn import DepthwiseConv2D

ModuleDef = Callable[..., nn.Module]


def FLAX_DWCONV(features, kernel_size, name=None, **kwargs):
  """flax's own depthwise conv, with DepthwiseConv2D's signature."""
  return nn.Conv(features, tuple(kernel_size), feature_group_count=features, name=name, **kwargs)


def _same(kernel_size):
  return tuple((k - 1) // 2 for k in kernel_size)


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
  def __call__(self, x):
    h = sum(self.dwconv(self.dim, tuple(k), padding=tuple((p, p) for p in _same(k)), dtype=self.dtype,
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
  def __call__(self, x):
    x = x.astype(self.dtype)
    for i, (dim, depth) in enumerate(zip(self.dims, self.depths)):
      if i == 0:
        x = nn.Conv(dim, (4, 4), strides=4, dtype=self.dtype, name="stem")(x)
        x = nn.LayerNorm(dtype=self.dtype, name="stem_norm")(x)
      else:
        x = nn.LayerNorm(dtype=self.dtype, name=f"down{i}_norm")(x)
        x = nn.Conv(dim, (2, 2), strides=2, dtype=self.dtype, name=f"down{i}")(x)
      for j in range(depth):
        x = self.block(dim, i)(x)
    x = nn.LayerNorm(dtype=self.dtype, name="head_norm")(jnp.mean(x, axis=(1, 2)))
    return nn.Dense(self.num_classes, dtype=jnp.float32, name="head")(x)


def ConvNeXt(dims=(96, 192, 384, 768), depths=(3, 3, 9, 3), kernel_size=7, dwconv=DepthwiseConv2D,
             num_classes=1000, dtype=jnp.float32):
  block = lambda dim, stage: ConvNeXtBlock(dim, ((kernel_size, kernel_size),), dwconv, dtype)
  return StagedNet(dims, depths, block, num_classes, dtype)


def SLaK(dims=(96, 192, 384, 768), depths=(3, 3, 9, 3), kernels=(51, 49, 47, 13), dwconv=DepthwiseConv2D,
         num_classes=1000, dtype=jnp.float32):
  block = lambda dim, stage: ConvNeXtBlock(dim, ((kernels[stage], 5), (5, kernels[stage]), (5, 5)), dwconv, dtype)
  return StagedNet(dims, depths, block, num_classes, dtype)


class RepLKBlock(nn.Module):
  """RepLKNet block: 1x1, k x k depthwise with a parallel 5x5 depthwise, 1x1; then a ConvFFN."""

  dim: int
  kernel: int
  dwconv: ModuleDef = DepthwiseConv2D
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x):
    h = nn.LayerNorm(dtype=self.dtype, name="prelkb_norm")(x)
    h = nn.relu(nn.Dense(self.dim, dtype=self.dtype, name="pw1")(h))
    big = (self.kernel, self.kernel)
    h = (self.dwconv(self.dim, big, padding=tuple((p, p) for p in _same(big)), dtype=self.dtype,
                     name="large_kernel")(h) +
         self.dwconv(self.dim, (5, 5), padding=((2, 2), (2, 2)), dtype=self.dtype, name="small_kernel")(h))
    x = x + nn.Dense(self.dim, dtype=self.dtype, name="pw2")(nn.relu(h))
    h = nn.LayerNorm(dtype=self.dtype, name="ffn_norm")(x)
    h = nn.gelu(nn.Dense(4 * self.dim, dtype=self.dtype, name="ffn1")(h))
    return x + nn.Dense(self.dim, dtype=self.dtype, name="ffn2")(h)


def RepLKNet31B(dims=(128, 256, 512, 1024), depths=(2, 2, 18, 2), kernels=(31, 29, 27, 13),
                dwconv=DepthwiseConv2D, num_classes=1000, dtype=jnp.float32):
  block = lambda dim, stage: RepLKBlock(dim, kernels[stage], dwconv, dtype)
  return StagedNet(dims, depths, block, num_classes, dtype)


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
  def __call__(self, x):
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
    # A reduced ConvNeXt for CPU runs and the convergence check.
    "convnext_micro": lambda dwconv, n, dtype: ConvNeXt(dims=(24, 48, 96, 192), depths=(1, 1, 2, 1),
                                                        dwconv=dwconv, num_classes=n, dtype=dtype),
}
DWCONVS = {"flashdwc": DepthwiseConv2D, "flax": FLAX_DWCONV}
