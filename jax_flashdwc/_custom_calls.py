"""The raw custom calls: one primitive per pass, lowered to its XLA FFI handler.

These are what XLA finally runs on each device. The public primitives in ops.py
lower to them through the partitioning rules in _partitioning.py.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray
from jax.extend.core import Primitive
from jax.interpreters import mlir

from . import _activations, _ffi

try:
  from jax.interpreters.xla import apply_primitive
except ImportError:  # Newer jax keeps it in dispatch only.
  from jax._src.dispatch import apply_primitive

FFI_TARGETS = ("flashdwc_fwd", "flashdwc_fwd_fused", "flashdwc_bwd_data", "flashdwc_bwd_filter")


def fwd_abstract(x, w, *, geometry):
  """y: (N, Ho, Wo, C) from x (N, H, W, C) and w (KH, KW, 1, C)."""
  ho, wo = geometry.output_hw(x.shape[1:3], w.shape[:2])
  return ShapedArray((x.shape[0], ho, wo, x.shape[3]), x.dtype)


def fwd_fused_abstract(x, w, bias, scale, shift, *, geometry, activation, prologue, input_activation):
  """y = activation(conv(x', w) + bias), x' = input_activation(x * scale + shift) if
  `prologue` else x: as fwd_abstract; bias (C,) in x's dtype, scale and shift (C,) float32."""
  return fwd_abstract(x, w, geometry=geometry)


def bwd_data_abstract(dy, w, *, geometry, input_hw):
  """dx: (N, H, W, C) from dy (N, Ho, Wo, C) and w."""
  return ShapedArray((dy.shape[0], *input_hw, dy.shape[3]), dy.dtype)


def bwd_filter_abstract(x, dy, *, geometry, kernel_hw, deterministic):
  """dw: (KH, KW, 1, C) from x and dy."""
  return ShapedArray((*kernel_hw, 1, x.shape[3]), x.dtype)


def _ffi_lowering(target: str):
  lower = jax.ffi.ffi_lowering(target)

  def rule(ctx, *operands, geometry, activation=None, prologue=False, input_activation=None, **_shape_params):
    # Only `geometry` (and the fused forward's activations) reach the handler;
    # shapes travel with the buffers.
    attributes = {"geometry": geometry.ffi_attribute()}
    if target == "flashdwc_fwd_fused":
      attributes["activation"] = np.int64(_activations.code(activation))
      # -1: no prologue (scale and shift are then ignored).
      attributes["prologue"] = np.int64(_activations.code(input_activation) if prologue else -1)
    return lower(ctx, *operands, **attributes)

  return rule


def _bwd_filter_cuda_lowering(ctx, x, dy, *, geometry, kernel_hw, deterministic):
  # The CUDA filter gradient sums chunk partials in an fp32 workspace. It is a
  # second result of the custom call, so that XLA allocates it (valid inside
  # command buffers too); only dw is returned.
  x_aval, dy_aval = ctx.avals_in
  workspace_bytes = _ffi.cuda_bwd_filter_workspace_bytes(
      batch=x_aval.shape[0], out_h=dy_aval.shape[1], channels=x_aval.shape[3], kernel_h=kernel_hw[0],
      kernel_w=kernel_hw[1], stride_h=geometry.strides[0], stride_w=geometry.strides[1],
      dilation_h=geometry.dilation[0], dilation_w=geometry.dilation[1], deterministic=deterministic,
      half_precision=x_aval.dtype != jnp.float32)
  workspace = ShapedArray((max(workspace_bytes // 4, 1),), jnp.float32)
  lower = jax.ffi.ffi_lowering("flashdwc_bwd_filter")
  dw, _ = lower(ctx.replace(avals_out=[*ctx.avals_out, workspace]), x, dy,
                geometry=geometry.ffi_attribute(), deterministic=bool(deterministic))
  return [dw]


def plan_problem(geometry, x_shape, out_hw, kernel_hw) -> dict[str, int]:
  """The DwConvParams fields of a problem (csrc/common/params.h) for the plan's queries."""
  attribute = geometry.ffi_attribute()
  return {"batch": x_shape[0], "in_h": x_shape[1], "in_w": x_shape[2], "out_h": out_hw[0], "out_w": out_hw[1],
          "channels": x_shape[3], "kernel_h": kernel_hw[0], "kernel_w": kernel_hw[1],
          **{k: int(v) for k, v in attribute.items()}}


def _with_workspace(target, workspace_bytes):
  """A CUDA lowering of `target` that adds a uint8 workspace result of
  workspace_bytes(ctx, **params) bytes (at least one) and returns the others: the
  Hopper forward's planar copies (csrc/fwd/wgmma_layout.h). The plan sizes it for
  the device the lowering runs on, and the handler picks that kernel only where the
  workspace it gets is large enough, so a smaller one is never wrong, only slower."""
  rule = _ffi_lowering(target)

  def lowering(ctx, *operands, **params):
    size = max(int(workspace_bytes(ctx, **params)), 1)
    workspace = ShapedArray((size,), jnp.uint8)
    results = rule(ctx.replace(avals_out=[*ctx.avals_out, workspace]), *operands, **params)
    return results[:-1]

  return lowering


def _fwd_workspace_bytes(ctx, *, geometry, prologue=False, **_params):
  x_aval, w_aval = ctx.avals_in[:2]
  (y_aval,) = ctx.avals_out
  problem = plan_problem(geometry, x_aval.shape, y_aval.shape[1:3], w_aval.shape[:2])
  return _ffi.fwd_workspace_bytes(problem, half_precision=x_aval.dtype != jnp.float32, prologue=bool(prologue))


def _bwd_data_workspace_bytes(ctx, *, geometry, input_hw, **_params):
  dy_aval, w_aval = ctx.avals_in
  problem = plan_problem(geometry, (dy_aval.shape[0], *input_hw, dy_aval.shape[3]), dy_aval.shape[1:3],
                     w_aval.shape[:2])
  return _ffi.bwd_data_workspace_bytes(problem, half_precision=dy_aval.dtype != jnp.float32)


def _missing_cuda_lowering(ctx, *operands, **params):
  raise NotImplementedError(
      "jax_flashdwc was built without its CUDA kernels (no CUDA compiler was found at "
      "install time), so it cannot run on a GPU. Reinstall it where nvcc is on PATH, or "
      "pass implementation='xla' to depthwise_conv2d.")


def _make(target, abstract, cuda_lowering=None):
  prim = Primitive(target + "_call")
  prim.def_impl(partial(apply_primitive, prim))
  prim.def_abstract_eval(abstract)
  mlir.register_lowering(prim, _ffi_lowering(target), platform="cpu")
  if not _ffi.cuda_available():
    cuda_lowering = _missing_cuda_lowering
  mlir.register_lowering(prim, cuda_lowering or _ffi_lowering(target), platform="cuda")
  return prim


fwd_call_p = _make("flashdwc_fwd", fwd_abstract, _with_workspace("flashdwc_fwd", _fwd_workspace_bytes))
fwd_fused_call_p = _make("flashdwc_fwd_fused", fwd_fused_abstract,
                         _with_workspace("flashdwc_fwd_fused", _fwd_workspace_bytes))
bwd_data_call_p = _make("flashdwc_bwd_data", bwd_data_abstract,
                        _with_workspace("flashdwc_bwd_data", _bwd_data_workspace_bytes))
# On the CPU, the filter gradient is always deterministic; `deterministic` only
# reaches the CUDA handler.
bwd_filter_call_p = _make("flashdwc_bwd_filter", bwd_filter_abstract, _bwd_filter_cuda_lowering)
