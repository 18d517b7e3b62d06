"""The depthwise 1-D convolution in plain jnp, as K shifted multiply-adds.

This is what runs the general case (segment_ids, initial_state) under
implementation="xla", and what the library's 1-D kernels implement. XLA fuses
the K taps into one elementwise loop fusion; it accumulates in float32.
"""

from __future__ import annotations

import jax.numpy as jnp

from . import _activations
from ._conv1d_args import Conv1DSpec


def extended_input(x, spec: Conv1DSpec, initial_state):
  """x with its padding: initial_state (or zeros) before, zeros after; negative padding crops."""
  lo, hi = spec.padding
  n, length, c = x.shape
  x = x[:, max(-lo, 0):length - max(-hi, 0)]
  lo, hi = max(lo, 0), max(hi, 0)
  before = initial_state if initial_state is not None else jnp.zeros((n, lo, c), x.dtype)
  return jnp.concatenate([before.astype(x.dtype), x, jnp.zeros((n, hi, c), x.dtype)], axis=1)


def extended_segments(segment_ids, spec: Conv1DSpec):
  """segment_ids over the padded positions: those before x take position 0's id (the
  initial state continues the sequence at position 0), those after take L-1's."""
  lo, hi = spec.padding
  first, last = segment_ids[:, :1], segment_ids[:, -1:]
  n = segment_ids.shape[0]
  return jnp.concatenate([jnp.broadcast_to(first, (n, lo)), segment_ids, jnp.broadcast_to(last, (n, hi))], axis=1)


def conv1d_preactivation(x, kernel, spec: Conv1DSpec, bias=None, segment_ids=None, initial_state=None):
  """conv(x, w) + bias in float32: (N, L, C), (K, 1, C) -> (N, Lo, C)."""
  length = x.shape[1]
  lo_out = spec.output_length(length)
  xe = extended_input(x, spec, initial_state).astype(jnp.float32)
  w = kernel[:, 0, :].astype(jnp.float32)
  s, d = spec.stride, spec.dilation
  if segment_ids is not None:
    # Stride 1, Lo = L and padding >= 0 (checked): output t belongs to position t.
    se = extended_segments(segment_ids, spec)
  acc = jnp.zeros((x.shape[0], lo_out, x.shape[2]), jnp.float32)
  for k in range(spec.kernel_size):
    start = k * d
    tap = xe[:, start:start + s * (lo_out - 1) + 1:s] * w[k]
    if segment_ids is not None:
      tap = jnp.where((se[:, start:start + lo_out] == segment_ids)[..., None], tap, 0.0)
    acc = acc + tap
  if bias is not None:
    acc = acc + bias.astype(jnp.float32)
  return acc


def conv1d(x, kernel, spec: Conv1DSpec, bias=None, activation=None, segment_ids=None, initial_state=None):
  """activation(conv(x, w) + bias), computed in float32 and rounded once to x's dtype."""
  z = conv1d_preactivation(x, kernel, spec, bias, segment_ids, initial_state)
  return _activations.apply(activation, z).astype(x.dtype)


def final_state(x, spec: Conv1DSpec, segment_ids=None, initial_state=None):
  """The last dilation * (K - 1) inputs, oldest first, as the next chunk's initial_state.

  Taken over initial_state ++ x, so a chunk shorter than the state keeps part of the
  state it was given (zeros where none was given). With segment_ids, the inputs whose
  segment differs from the last position's are zeroed (the initial state counts as
  position 0's segment): the next chunk, continuing that segment, must not see them.
  """
  n, length, c = x.shape
  size = spec.state_length
  before = initial_state if initial_state is not None else jnp.zeros((n, size, c), x.dtype)
  state = jnp.concatenate([before, x], axis=1)[:, length:]
  if segment_ids is None or size == 0 or length == 0:
    return state
  seg = jnp.concatenate([jnp.broadcast_to(segment_ids[:, :1], (n, size)), segment_ids], axis=1)[:, length:]
  return jnp.where((seg == segment_ids[:, -1:])[..., None], state, jnp.zeros((), x.dtype))


def conv1d_update(x_t, state, kernel, bias=None, activation=None):
  """One causal step: (y_t, new_state) from x_t (N, C) and the last K - 1 inputs (N, K - 1, C)."""
  acc_dtype = jnp.promote_types(x_t.dtype, jnp.float32)  # float64 stays float64
  w = kernel[:, 0, :].astype(acc_dtype)
  k = kernel.shape[0]
  acc = x_t.astype(acc_dtype) * w[k - 1]
  if k > 1:
    # An elementwise sum, not an einsum: a float32 dot may run in TF32 on a GPU.
    acc = acc + (state.astype(acc_dtype) * w[:k - 1]).sum(axis=1)
  if bias is not None:
    acc = acc + bias.astype(acc_dtype)
  y = _activations.apply(activation, acc).astype(x_t.dtype)
  return y, shifted_state(state, x_t)


def shifted_state(state, x_t):
  """The decoding state after one step: state (N, K - 1, C) shifted by one, x_t last."""
  if state.shape[1] == 0:
    return state
  return jnp.concatenate([state[:, 1:], x_t[:, None].astype(state.dtype)], axis=1)
