"""Loads the native module and registers its XLA FFI handlers with JAX.

A CPU-only build registers the CPU handlers alone; `cuda_available()` tells
whether the CUDA handlers were built in.
"""

from __future__ import annotations

import jax

from . import _jax_flashdwc

_REGISTRATIONS = _jax_flashdwc.registrations()

for _platform, _targets in _REGISTRATIONS.items():
  for _name, _capsule in _targets.items():
    jax.ffi.register_ffi_target(_name, _capsule, platform=_platform)


def cuda_available() -> bool:
  """Whether this build of jax_flashdwc contains the CUDA kernels."""
  return "CUDA" in _REGISTRATIONS


def set_poison_outputs(on: bool) -> None:
  """Makes every handler fill its output with NaN before its kernel runs.

  A testing aid: an element that a kernel fails to write then shows as NaN. It is
  read when a handler runs (or is captured into a CUDA graph), so set it before
  compiling the functions under test.
  """
  _jax_flashdwc.set_poison_outputs(bool(on))


def cuda_bwd_filter_workspace_bytes(**shape) -> int:
  """Bytes of fp32 workspace the CUDA filter gradient needs (see dwconv_cuda.h)."""
  return int(_jax_flashdwc.cuda_bwd_filter_workspace_bytes(**shape))
