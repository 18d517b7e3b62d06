"""Where a training step's GPU time goes: runs a few jitted steps of a model under
the JAX profiler and prints, per depthwise conv implementation, the GPU time of each
kernel per step (summed over its launches), grouped into depthwise conv (ours or
XLA's), matmuls and convolutions, XLA fusions, copies, and the rest.

  python examples/profile_train_step.py --model convnext_t --bf16 --convs flax flashdwc scale

`scale` stands in a per-channel multiply (the filter's centre tap) for the depthwise
conv: the step's cost without it, the ceiling a faster depthwise conv can reach.
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import statistics
import sys
import tempfile

import jax
import jax.numpy as jnp
from flax import linen as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_train import make_step, run_steps  # noqa: E402
from models import DWCONVS, MODELS  # noqa: E402


class PerChannelScale(nn.Module):
  """The depthwise conv's parameters, but only the centre tap applied: y = x * w + b."""

  features: int
  kernel_size: tuple
  padding: object = None
  use_bias: bool = True
  dtype: object = None

  @nn.compact
  def __call__(self, x):
    kernel = self.param("kernel", nn.initializers.lecun_normal(), (*self.kernel_size, 1, self.features))
    centre = kernel[self.kernel_size[0] // 2, self.kernel_size[1] // 2, 0]
    y = x * centre.astype(self.dtype or x.dtype)
    if self.use_bias:
      y = y + self.param("bias", nn.initializers.zeros, (self.features,)).astype(y.dtype)
    return y


def category(kernel_name):
  """A coarse class of a GPU kernel, from its name. XLA's own kernels are named after
  their fusion (`loop_convert_multiply_fusion_17`), so they are told apart first."""
  name = kernel_name.lower()
  if "dwconv" in name:
    return "flashdwc"
  if "fusion" in name or name.startswith(("loop_", "input_", "wrapped_")) or "transpose" in name:
    return "xla fusion"
  if "conv" in name or "cudnn" in name or "dgrad" in name or "wgrad" in name:
    return "xla conv (cudnn)"
  if "gemm" in name or "cutlass" in name or "xmma" in name or "nvjet" in name or "triton" in name:
    return "matmul"
  if "memcpy" in name or "memset" in name or "copy" in name:
    return "copy/memset"
  return "other"


def kernel_times(trace_dir):
  """{kernel name: total ns} over the GPU stream lines of the trace in trace_dir."""
  from jax.profiler import ProfileData

  paths = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)
  if not paths:
    raise RuntimeError(f"no .xplane.pb under {trace_dir}")
  totals = collections.Counter()
  for plane in ProfileData.from_file(paths[0]).planes:
    if not plane.name.startswith("/device:GPU"):
      continue
    for line in plane.lines:
      if not line.name.startswith("Stream"):
        continue
      for event in line.events:
        totals[event.name] += event.duration_ns
  return totals


def profile(model, conv, batch, size, bf16, steps):
  """Median wall seconds per step, and {kernel: ns per step} from a profiled run
  (empty without a GPU)."""
  step, args = make_step(model, conv, batch, size, bf16)
  _, args = run_steps(step, args, 3)
  times, args = run_steps(step, args, steps)
  trace_dir = tempfile.mkdtemp(prefix="flashdwc_profile_")
  with jax.profiler.trace(trace_dir):
    _, args = run_steps(step, args, steps)
  per_step = {name: ns / steps for name, ns in kernel_times(trace_dir).items()}
  return statistics.median(times), per_step


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--model", default="convnext_t", choices=sorted(MODELS))
  parser.add_argument("--convs", nargs="+", default=["flax", "flashdwc", "scale"])
  parser.add_argument("--batch", type=int, default=64)
  parser.add_argument("--image-size", type=int, default=224)
  parser.add_argument("--bf16", action="store_true")
  parser.add_argument("--steps", type=int, default=10)
  parser.add_argument("--top", type=int, default=25, help="kernels listed per conv")
  args = parser.parse_args(argv)
  DWCONVS.setdefault("scale", PerChannelScale)

  results = {}
  for conv in args.convs:
    wall, per_step = profile(args.model, conv, args.batch, args.image_size, args.bf16, args.steps)
    results[conv] = wall, per_step
    busy = sum(per_step.values())
    print(f"\n== {args.model} with {conv}: {wall * 1e3:.2f} ms per step (wall), "
          f"{busy / 1e6:.2f} ms of GPU kernels per step, {len(per_step)} distinct kernels")
    groups = collections.Counter()
    for name, ns in per_step.items():
      groups[category(name)] += ns
    for group, ns in groups.most_common():
      print(f"   {group:18s} {ns / 1e6:8.3f} ms  {100 * ns / busy:5.1f}%")
    for name, ns in sorted(per_step.items(), key=lambda kv: -kv[1])[:args.top]:
      print(f"   {ns / 1e3:9.1f} us  {category(name):18s} {name[:110]}")
  return results


if __name__ == "__main__":
  main()
