"""`depthwise_conv1d` and `depthwise_conv1d_update`: the sequence-model convolution.

The short causal depthwise conv of Mamba, Hyena and similar blocks, channel-last,
with packed sequences (segment_ids), chunked prefill (initial_state and
final_state) and one-token decoding (depthwise_conv1d_update).

Routes: stride-1 problems with one output per input run the 1-D kernels
(_conv1d_ops.py; for those without segment_ids or an initial_state,
PLAIN_ON_1D_KERNELS says why); the rest run the 2-D kernels as H = 1;
implementation="xla" runs lax's conv, or the jnp tap loop of _conv1d_xla.py where
segments or a state are given. The final state is a slice
of the inputs, taken in jnp; the decoding step is elementwise work XLA fuses.
"""

from __future__ import annotations

from typing import Any, Literal

import jax
import jax.numpy as jnp

from . import _conv1d_ops, _conv1d_xla
from ._conv1d_args import Conv1DSpec, check_conv1d, check_update
from .conv import depthwise_conv2d

_FLOAT64 = jnp.dtype(jnp.float64)

# Whether problems without segment_ids and initial_state, which the 2-D kernels
# also run (as H = 1), take the 1-D kernels instead where those apply (stride 1,
# one output per input). Measured on an H100 80GB HBM3 (bf16, K = 4, bias + SiLU,
# 16k-32k tokens x 1536 and 5120 channels; benchmarks/results/conv1d_h100_80gb_hbm3.csv):
# forward + backward on the 1-D kernels takes 0.53-0.82 of the 2-D path's time, the
# forward 0.62-1.03, the filter gradient alone 0.43-0.78; the input gradient alone is
# the one pass where the 2-D path is ahead (its time 0.85-1.00 of the 1-D backward's,
# which forms every gradient). Only K = 2-4 at dilation 1 was timed (_plain_on_1d_kernels).
# Set False to run them all on the 2-D kernels.
PLAIN_ON_1D_KERNELS = True


def _plain_on_1d_kernels(spec: Conv1DSpec) -> bool:
  """Whether a problem without segments or state runs the 1-D kernels: the measured
  window kernels (K = 2-4, dilation 1) when PLAIN_ON_1D_KERNELS; longer or dilated
  filters, whose 1-D kernel rereads taps through the caches and was not timed against
  the 2-D path, stay on it."""
  return PLAIN_ON_1D_KERNELS and spec.dilation == 1 and 2 <= spec.kernel_size <= 4


def _kernels_apply(spec: Conv1DSpec, x) -> bool:
  """Whether the 1-D kernels run this problem: stride 1, padding >= 0 and one output
  per input (CAUSAL, SAME, SAME_LOWER or (a, b) with a + b = d * (K - 1))."""
  lo, hi = spec.padding
  return spec.stride == 1 and lo >= 0 and hi >= 0 and lo + hi == spec.state_length and x.size > 0


def _via_1d_kernels(x, kernel, spec, bias, activation, segment_ids, initial_state):
  n, _, c = x.shape
  b = jnp.zeros((0,), x.dtype) if bias is None else bias
  # Ids are compared for equality only; int32 keeps distinct ids distinct up to 2**31.
  seg = jnp.zeros((0,), jnp.int32) if segment_ids is None else segment_ids.astype(jnp.int32)
  state = jnp.zeros((n, 0, c), x.dtype) if initial_state is None else initial_state
  return _conv1d_ops.conv1d_fwd(x, kernel, b, seg, state, pad_lo=spec.padding[0], dilation=spec.dilation,
                                activation=activation)


def _via_conv2d(x, kernel, spec, bias, activation, initial_state, implementation):
  """The convolution as a 2-D one of height 1, on the library's 2-D kernels (or XLA's)."""
  padding = spec.padding
  if initial_state is not None:
    # The state takes the place of the causal zero padding.
    x, padding = jnp.concatenate([initial_state, x], axis=1), (0, 0)
  y = depthwise_conv2d(x[:, None], kernel[None], strides=(1, spec.stride), padding=((0, 0), padding),
                       kernel_dilation=(1, spec.dilation), bias=bias, activation=activation,
                       implementation=implementation)
  return y[:, 0]


def depthwise_conv1d(
    x: jax.Array,
    kernel: jax.Array,
    *,
    padding: str | int | Any = "CAUSAL",
    strides: int = 1,
    kernel_dilation: int = 1,
    bias: jax.Array | None = None,
    activation: Literal["relu", "gelu", "gelu_tanh", "silu"] | None = None,
    segment_ids: jax.Array | None = None,
    initial_state: jax.Array | None = None,
    return_final_state: bool = False,
    implementation: Literal["flashdwc", "xla"] | None = None,
) -> jax.Array | tuple[jax.Array, jax.Array]:
  """Depthwise 1-D convolution over the sequence axis of (N, L, C) inputs.

  y[n, t, c] = activation(bias[c] + sum_k kernel[k, 0, c] * xp[n, t * s + k * d, c]),
  xp being x padded with `padding` (cross-correlation, as lax.conv_general_dilated).

  Args:
    x: (N, L, C), float32, float16 or bfloat16 (float64 runs XLA's conv).
    kernel: (K, 1, C), any K >= 1: the layout of
      ``flax.linen.Conv(features=C, kernel_size=(K,), feature_group_count=C)``.
    padding: "CAUSAL" (d * (K - 1) zeros before, none after: output t sees inputs
      t - d * (K - 1) .. t), "SAME", "SAME_LOWER", "VALID", an int (both sides),
      or (before, after); negative padding crops.
    strides: the output stride s >= 1.
    kernel_dilation: the tap spacing d >= 1.
    bias: optional (C,) in x's dtype, added in float32 before the activation.
    activation: None, "relu", "gelu", "gelu_tanh" or "silu", applied in float32
      to conv + bias before the one rounding to x's dtype.
    segment_ids: optional (N, L) integers for packed sequences: output t sums only
      the inputs whose id equals position t's, so no value crosses a boundary
      between segments (as causal-conv1d's seq_idx). Needs one output per input:
      strides=1 and padding CAUSAL, SAME, SAME_LOWER or (a, b) >= 0 with
      a + b = d * (K - 1). Ids need not be sorted; equal ids far apart in a row do
      see each other if within the filter's reach.
    initial_state: optional (N, d * (K - 1), C) in x's dtype: the inputs before
      x[:, 0], in place of the causal zero padding (chunked prefill). It belongs to
      position 0's segment: where a chunk starts a new segment, pass zeros.
      Causal padding and strides=1 only.
    return_final_state: also return the final state, (N, d * (K - 1), C): the
      last d * (K - 1) inputs, oldest first, of initial_state ++ x (so a chunk
      shorter than the state keeps the older state's tail; zeros stand in for an
      absent initial_state). With segment_ids, entries whose segment differs from
      position L - 1's are zeroed (initial_state counting as position 0's
      segment), so that feeding it as the next chunk's initial_state gives what
      running both chunks at once gives whenever the chunk boundary does not also
      start a new segment. Causal padding and strides=1 only.
    implementation: None or "flashdwc": this library's kernels; "xla": XLA only.

  Returns:
    y (N, Lo, C) in x's dtype, or (y, final_state) with return_final_state.
    Differentiable (forward and reverse mode) in x, kernel, bias and
    initial_state; batchable with vmap.
  """
  spec = check_conv1d(x, kernel, padding=padding, strides=strides, kernel_dilation=kernel_dilation, bias=bias,
                      activation=activation, segment_ids=segment_ids, initial_state=initial_state,
                      return_final_state=return_final_state, implementation=implementation)
  if jnp.dtype(x.dtype) == _FLOAT64:
    implementation = "xla"
  general = segment_ids is not None or initial_state is not None
  if implementation != "xla" and _kernels_apply(spec, x) and (general or _plain_on_1d_kernels(spec)):
    y = _via_1d_kernels(x, kernel, spec, bias, activation, segment_ids, initial_state)
  elif segment_ids is not None:
    y = _conv1d_xla.conv1d(x, kernel, spec, bias, activation, segment_ids, initial_state)
  else:
    y = _via_conv2d(x, kernel, spec, bias, activation, initial_state, implementation)
  if not return_final_state:
    return y
  return y, _conv1d_xla.final_state(x, spec, segment_ids, initial_state)


def depthwise_conv1d_update(
    x_t: jax.Array,
    state: jax.Array,
    kernel: jax.Array,
    bias: jax.Array | None = None,
    activation: Literal["relu", "gelu", "gelu_tanh", "silu"] | None = None,
    implementation: Literal["flashdwc", "xla"] | None = None,
) -> tuple[jax.Array, jax.Array]:
  """One decoding step of the causal convolution (dilation 1).

  Args:
    x_t: (N, C), this step's input of each sequence.
    state: (N, K - 1, C) in x_t's dtype, the last K - 1 inputs oldest first: the
      final_state of `depthwise_conv1d(..., return_final_state=True)` or of the
      previous step (zeros for a new sequence).
    kernel: (K, 1, C) in x_t's dtype; bias, activation as in depthwise_conv1d.
    implementation: None or "flashdwc": one custom call that forms y_t and writes
      the new state over the old one's buffer (its derivative is the jnp step's).
      For 64 x 5120 bf16 channels, K = 4, on an H100 the kernel takes 4.6 µs a
      step against 10.9-12.8 µs for the two fusions of XLA's jnp step (Nsight
      Compute kernel times; a chain of 128 steps in one executable ran 7.1-13.1
      µs a step on both sides, its per-step floor: docs/conv1d.md). "xla": the
      jnp step. None takes the jnp step for float64, which the kernel lacks.

  Returns:
    (y_t (N, C), new_state (N, K - 1, C)): y_t equals the causal convolution's
    output at this position; new_state is state shifted by one with x_t last.
    Under ``jax.jit(depthwise_conv1d_update, donate_argnums=1)`` the new state
    reuses the old state's buffer.
  """
  check_update(x_t, state, kernel, bias, activation, implementation)
  if implementation == "xla" or (implementation is None and x_t.dtype == jnp.float64):
    return _conv1d_xla.conv1d_update(x_t, state, kernel, bias, activation)
  b = jnp.zeros((0,), x_t.dtype) if bias is None else bias
  y, new_state = _conv1d_ops.conv1d_step_p.bind(x_t, state, kernel, b, activation=activation)
  return y, new_state
