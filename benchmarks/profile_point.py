"""One pass at one point, with Nsight Compute's capture around a single warm call, so
that XLA's own kernels can be profiled beside ours (the kernel-level harnesses in
benchmarks/cuda/ run only ours). The call is jitted, compiled and run three times
first (XLA's autotuning happens there, outside the capture); then the driver's
profiler start and stop (cuProfilerStart / cuProfilerStop from libcuda) bracket one
call, so that `ncu --profile-from-start off` reports every kernel of that call and
nothing else.

  ncu --profile-from-start off --clock-control none --section SpeedOfLight \\
      python3 benchmarks/profile_point.py bwd_filter float32 128 128 128 128 3 --implementation xla

(`.ci/gpu profile "jax bwd_filter float32 128 128 128 128 3 xla"` runs it.) Without
ncu, or without a GPU, it runs the same calls and prints the captured call's time,
which checks that the point runs.
"""

import argparse
import ctypes
import os
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from bench_dwconv import MODES, make_fn, make_inputs  # noqa: E402
from shapes import ConvCase  # noqa: E402

DTYPES = {"float32": jnp.float32, "float16": jnp.float16, "bfloat16": jnp.bfloat16}


def _check(result, what):
  if result != 0:
    print(f"warning: {what} returned CUDA error {result}; the capture may be empty", file=sys.stderr)


def _driver_with_primary_context():
  """libcuda with device 0's primary context current on this thread: the profiler
  start and stop act on the current context, and XLA runs in the primary one, which
  it made current on its own threads, not necessarily on this one."""
  driver = ctypes.CDLL("libcuda.so.1")
  ctx = ctypes.c_void_p()
  _check(driver.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
  if not ctx.value:
    device = ctypes.c_int()
    _check(driver.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
    _check(driver.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device), "cuDevicePrimaryCtxRetain")
    _check(driver.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
  return driver


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("mode", choices=MODES)
  parser.add_argument("dtype", choices=sorted(DTYPES))
  for name, what in (("n", "batch"), ("h", "height"), ("w", "width"), ("c", "channels"), ("k", "k of a k x k filter")):
    parser.add_argument(name, type=int, help=what)
  parser.add_argument("--implementation", choices=("flashdwc", "xla"), default="xla")
  parser.add_argument("--stride", type=int, default=1)
  args = parser.parse_args(argv)
  n, h, w, c, k = args.n, args.h, args.w, args.c, args.k
  case = ConvCase(f"profile_{n}x{h}x{w}x{c}_k{k}", n, h, w, c, k, k, strides=args.stride)
  dtype = DTYPES[args.dtype]
  # As bench_dwconv.py times them: ours through the default dispatch, XLA's named.
  fn = make_fn(args.mode, None if args.implementation == "flashdwc" else "xla", case.conv_kwargs())
  y_shape = jax.eval_shape(lambda x, w: jax.lax.conv_general_dilated(
      x, w, (args.stride, args.stride), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
      feature_group_count=c), jax.ShapeDtypeStruct(case.x_shape, dtype),
      jax.ShapeDtypeStruct(case.kernel_shape, dtype)).shape
  x, wt, dy = make_inputs(case, dtype, jax.random.key(0), y_shape)[0]
  for _ in range(3):
    jax.block_until_ready(fn(x, wt, dy))
  driver = _driver_with_primary_context() if jax.default_backend() == "gpu" else None
  start = time.perf_counter()
  if driver is not None:
    _check(driver.cuProfilerStart(), "cuProfilerStart")
  jax.block_until_ready(fn(x, wt, dy))
  if driver is not None:
    _check(driver.cuProfilerStop(), "cuProfilerStop")
  print(f"{args.mode} {args.dtype} {n}x{h}x{w}x{c} k{k} stride {args.stride} {args.implementation}: "
        f"{(time.perf_counter() - start) * 1e3:.3f} ms (one call, host-timed)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
