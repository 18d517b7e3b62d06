"""Kernel times of the decoding step, without the chained executable's per-step floor.

bench_conv1d.py times the step (64 x 5120 bf16 channels, K = 4, bias + SiLU) as 128
steps chained in one executable; there both implementations sat near that floor (on an
H100: 7.08 against XLA's 9.39 µs a step in one run, 11.6-13.1 against 11.4 in two
others), so the chain cannot tell which step is faster. This script runs the same chain
(16 steps, inputs placed from numpy so that the only kernels are the executable's) for
one implementation a process, to be run under Nsight Compute, and sums the kernel times
that ncu's CSV reports:

  for impl in flashdwc xla; do
    ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \\
        --log-file build/ncu_$impl.csv python benchmarks/profile_conv1d_update.py $impl
    python benchmarks/profile_conv1d_update.py --summarize build/ncu_$impl.csv
  done

`--cache-control none` keeps the L2 as the chain leaves it (a step's state is the last
step's output), and `--clock-control none` leaves the clocks alone.
"""

from __future__ import annotations

import argparse
import collections
import csv
import sys

STEPS, CALLS, BATCH, CHANNELS, TAPS = 16, 3, 64, 5120, 4


def run_chain(implementation: str) -> None:
  import jax
  import jax.numpy as jnp
  import ml_dtypes
  import numpy as np

  from jax_flashdwc import depthwise_conv1d_update

  rng = np.random.default_rng(0)

  def place(shape):
    return jax.device_put(rng.standard_normal(shape).astype(ml_dtypes.bfloat16))

  xs, state = place((STEPS, BATCH, CHANNELS)), place((BATCH, TAPS - 1, CHANNELS))
  w, b = place((TAPS, 1, CHANNELS)), place((CHANNELS,))

  def decode(xs, state):
    ys = []
    for t in range(STEPS):
      # As in bench_conv1d.py: without the barrier XLA fuses the chain into one convolution.
      y, state = jax.lax.optimization_barrier(depthwise_conv1d_update(xs[t], state, w, b, "silu", implementation))
      ys.append(y)
    return jnp.stack(ys), state

  fn = jax.jit(decode)
  for _ in range(CALLS):
    out = fn(xs, state)
  jax.block_until_ready(out)


def summarize(path: str) -> None:
  """Kernel count and time by kernel name over ncu's CSV, and the total a step."""
  with open(path) as f:
    rows = list(csv.reader(line for line in f if line.startswith('"')))
  header = rows[0]
  name_at, value_at, unit_at = header.index("Kernel Name"), header.index("Metric Value"), header.index("Metric Unit")
  # ncu names the unit "ns"/"us"/"ms" (2025 releases on the H100 machine) or "nsecond"/...
  to_us = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "ns": 1e-3, "us": 1.0, "ms": 1e3}
  by_kernel = collections.defaultdict(lambda: [0, 0.0])
  skipped = 0
  for row in rows[1:]:
    if "stream_executor::" in row[name_at]:
      # XLA's autotuner and its buffer checks at compile time (DelayKernel,
      # RedzoneAllocatorKernelImpl, xla_fp_comparison), not the executable's.
      skipped += 1
      continue
    entry = by_kernel[row[name_at][:90]]
    entry[0] += 1
    entry[1] += float(row[value_at].replace(",", "")) * to_us[row[unit_at]]
  for name, (count, us) in sorted(by_kernel.items(), key=lambda kv: -kv[1][1]):
    print(f"{count:5d} launches {us:10.2f} us ({us / count:7.3f} a launch)  {name}")
  if skipped:
    print(f"({skipped} launches of XLA's compile-time autotuning kernels left out)")
  total = sum(us for _, us in by_kernel.values())
  print(f"total {total:.2f} us over {STEPS * CALLS} steps: {total / (STEPS * CALLS):.3f} us a step")


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("implementation", nargs="?", choices=["flashdwc", "xla"])
  parser.add_argument("--summarize", metavar="NCU_CSV", help="sum the kernel times of ncu's CSV instead")
  args = parser.parse_args(argv)
  if args.summarize:
    summarize(args.summarize)
  elif args.implementation:
    run_chain(args.implementation)
  else:
    parser.error("give an implementation or --summarize")
  return 0


if __name__ == "__main__":
  sys.exit(main())
