"""Splits a benchmark executable's time into a cost a pass and a cost a call.

bench_layers.py and bench_conv1d.py time one executable applying a pass to R input
sets and divide its time by R, taking the cost a call (dispatch, synchronization, any
work XLA does once per execution) to be 40-60 us and so a few percent. Nsight Compute
disagrees on one H100 (docs/design-notes.md, register-filter kernel): VAN-B0's
64x7x7x256 5x5 forward kernel took 8.4 us a launch where bench_layers reported 19.1 us
a pass (R = 64), and the 1-D forward at 64k x 5120 tokens 449 us a launch where
bench_conv1d reported 610 us a pass (R = 3); XLA's own copy of x lost the same. Both
fit a fixed cost of about 0.5 ms a call. This script times the same executables at
several R and fits time = R * per_pass + per_call: if per_call is that large, the
benchmarks should report the slope; if per_pass stays at the benchmarks' figures, the
cost is per pass and belongs to the executable's launches.

Run it twice, the second time with XLA's command buffers off, to see whether they
carry the per-call cost (buffers the executable returns are new each call, so a
recorded graph may be updated or rebuilt each time):

  python benchmarks/profile_call_overhead.py
  XLA_FLAGS=--xla_gpu_enable_command_buffer= python benchmarks/profile_call_overhead.py

Prints one line per (layer or shape, pass, implementation): the time a call at each R,
the fitted time a pass and a call, and the kernel-only figures to compare with
(the harness's or Nsight Compute's). Run without `python -P`: it imports its
neighbours from benchmarks/.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

import bench_conv1d
import bench_layers
from bench_layers import MODEL_LAYERS

# Small registry layers (byte floors of 1-10 us) and one larger, by layer name.
LAYERS = ("lka_5x5_7x7x256", "14x14x384_s1", "square_3x3_14x14x48", "mlp_3x3_56x56x256")
# R of the 2-D passes, and of the 1-D forward at 64k x 5120 (0.45 ms a pass).
LAYER_REPS = (4, 16, 64)
CONV1D_REPS = (1, 2, 4)
CONV1D_SHAPE = (16, 4096, 5120, 4)  # N, L, C, K
CALLS = 9


def fit(reps, seconds):
  """(seconds a pass, seconds a call) of a least-squares line through (R, time a call)."""
  slope, intercept = np.polyfit(np.asarray(reps, float), np.asarray(seconds, float), 1)
  return float(slope), float(intercept)


def report(name, reps, seconds):
  per_pass, per_call = fit(reps, seconds)
  calls = "  ".join(f"R={r}: {s * 1e3:7.3f} ms ({s / r * 1e6:7.1f} us/R)" for r, s in zip(reps, seconds))
  print(f"{name:44s} {calls}  ->  {per_pass * 1e6:7.1f} us a pass + {per_call * 1e6:6.0f} us a call", flush=True)


def layer_rows(names, passes, dtype):
  layers = {l.layer: l for l in MODEL_LAYERS}
  for name in names:
    case = layers[name].case
    for pass_name in passes:
      for impl in ("flashdwc", "xla"):
        fn, specs, shared = bench_layers.pass_function(pass_name, case, impl, dtype)
        pairs = bench_layers.random_operands(specs, shared, max(LAYER_REPS), jax.random.key(0))
        seconds = [bench_conv1d.time_executable(fn, (pairs[:r],), CALLS, warmup=1) for r in LAYER_REPS]
        report(f"{layers[name].model} {name} {pass_name} {impl}", LAYER_REPS, seconds)
        del pairs


def conv1d_rows(dtype):
  n, length, c, k = CONV1D_SHAPE
  sets = bench_conv1d.make_inputs(jax.random.key(0), n, length, c, k, dtype, max(CONV1D_REPS))
  for mode, impl in (("fwd", "flashdwc-1d"), ("copy", "xla")):
    fn = bench_conv1d.repeated(bench_conv1d.pass_fn(mode, impl), impl)
    seconds = [bench_conv1d.time_executable(fn, [s[:r] for s in sets], CALLS, warmup=1) for r in CONV1D_REPS]
    report(f"conv1d {n}x{length}x{c} K={k} {mode} {impl}", CONV1D_REPS, seconds)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--layers", nargs="+", default=list(LAYERS), help="registry layer names")
  parser.add_argument("--passes", nargs="+", default=["fwd"], choices=bench_layers.PASSES)
  parser.add_argument("--no-conv1d", action="store_true", help="leave out the 1-D forward")
  args = parser.parse_args(argv)
  print(f"{jax.devices()[0].device_kind}, jax {jax.__version__}", flush=True)
  layer_rows(args.layers, args.passes, jnp.bfloat16)
  if not args.no_conv1d:
    conv1d_rows(jnp.bfloat16)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
