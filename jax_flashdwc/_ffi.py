"""Loads the native module and registers its XLA FFI handlers with JAX.

A CPU-only build registers the CPU handlers alone; `cuda_available()` tells
whether the CUDA handlers were built in.
"""

from __future__ import annotations

import os
import re

import jax

from . import _jax_flashdwc


def installed_ffi_api_version() -> tuple[int, int] | None:
  """The XLA FFI API version of the installed jaxlib, read from the header it ships
  (None where that header cannot be read)."""
  try:
    with open(os.path.join(jax.ffi.include_dir(), "xla", "ffi", "api", "c_api.h")) as f:
      header = f.read()
  except (OSError, AttributeError):
    return None
  parts = [re.search(rf"#define XLA_FFI_API_{part} (\d+)", header) for part in ("MAJOR", "MINOR")]
  return None if None in parts else (int(parts[0].group(1)), int(parts[1].group(1)))


def check_ffi_api_version(built: tuple[int, int], installed: tuple[int, int] | None) -> None:
  """ImportError where XLA would refuse handlers compiled against API `built`.

  XLA refuses a handler whose API version is newer than its own, and not alone:
  JAX's backend then fails to start, taking every JAX computation down, CPU
  included (seen on the H200 with a wheel built under build isolation against a
  newer jax, API 0.5, than the jax 0.11.2 installed, API 0.4).
  """
  if installed is None or tuple(built) <= tuple(installed):
    return
  raise ImportError(
      f"jax_flashdwc was compiled against XLA FFI API {built[0]}.{built[1]}, but the "
      f"installed jax {jax.__version__} accepts up to {installed[0]}.{installed[1]}. Rebuild it "
      "against the installed jax: pip install --no-build-isolation . (from the source "
      "tree), or upgrade jax and jaxlib.")


check_ffi_api_version(tuple(_jax_flashdwc.xla_ffi_api_version), installed_ffi_api_version())

_REGISTRATIONS = _jax_flashdwc.registrations()

for _platform, _targets in _REGISTRATIONS.items():
  for _name, _capsule in _targets.items():
    jax.ffi.register_ffi_target(_name, _capsule, platform=_platform)


def plan_thresholds() -> dict:
  """The native kernel plan's thresholds (csrc/plan/thresholds.h), by name."""
  return dict(_jax_flashdwc.plan_thresholds())


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


def fwd_workspace_bytes(problem: dict, *, half_precision: bool, prologue: bool) -> int:
  """Bytes of workspace the CUDA forward wants on the current device (plan/fwd_launch.h)."""
  return int(_jax_flashdwc.fwd_workspace_bytes(problem, half_precision=half_precision, prologue=prologue))


def bwd_data_workspace_bytes(problem: dict, *, half_precision: bool) -> int:
  """Bytes of workspace the CUDA input gradient wants on the current device (plan/bwd_data_launch.h)."""
  return int(_jax_flashdwc.bwd_data_workspace_bytes(problem, half_precision=half_precision))


def cuda_bwd_filter_workspace_bytes(**shape) -> int:
  """Bytes of fp32 workspace the CUDA filter gradient needs (see dwconv_cuda.h)."""
  return int(_jax_flashdwc.cuda_bwd_filter_workspace_bytes(**shape))
