"""Benchmark: jax_flashdwc's depthwise convolution against XLA's, in one run.

For each problem, both implementations are jitted, checked against each other
(no speedup is reported for a result that disagrees), warmed up, and timed: the
median over --samples timed samples (fewer, down to 5, for calls so slow that
they would pass 6 s of timing), each the mean of a few calls
launched back to back (so host dispatch overlaps device work), on random data
rotated among enough copies to defeat the L2 cache. Writes a CSV with
provenance under --out and prints a table last. --resume CSV appends to an
earlier run's CSV and skips the points it holds, so a run longer than one call on
the GPU machine goes on across calls (keep the CSV in build/, which a warm machine
keeps, and copy it to $OUT after each call). --stop-after SECONDS starts no point
that would run past SECONDS (judged by the last point's wall time), so that a call's
time limit does not cut a point short and waste its XLA autotuning.

  python benchmarks/bench_dwconv.py --mode fwd --dtype float32 --shapes paper models
  python benchmarks/bench_dwconv.py --dtype bfloat16 --shapes paper --resume build/bench/bf16.csv \
      --stop-after 540
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from shapes import TEST_CASES, model_layers, paper_points  # noqa: E402

from jax_flashdwc import conv as conv_module, depthwise_conv2d  # noqa: E402
from jax_caches import use_caches  # noqa: E402
from provenance import provenance  # noqa: E402

# fwd: y = conv(x, w). bwd_data: dx from (dy, w). bwd_filter: dw from (x, dy).
# fwd+bwd: one jitted value_and_grad of a layer (forward and both gradients).
# fwd_bias_gelu: the forward with bias + exact GELU fused into the kernel;
# fwd_bias_gelu_unfused: the same computed as conv, then bias and GELU by XLA (the
# sequence the fusion replaces). The bias is the filter's first tap row.
# fwd_bn_relu: the input prologue, a folded batch norm (per-channel scale and
# shift) and ReLU applied by the kernel as it reads x; fwd_bn_relu_unfused: XLA's
# elementwise pass writing x', then the conv. Scale and shift come from the filter.
MODES = ("fwd", "bwd_data", "bwd_filter", "fwd+bwd", "fwd_bias_gelu", "fwd_bias_gelu_unfused", "fwd_bn_relu",
         "fwd_bn_relu_unfused")
PASSES_PER_MODE = {"fwd": 1, "bwd_data": 1, "bwd_filter": 1, "fwd+bwd": 3, "fwd_bias_gelu": 1,
                   "fwd_bias_gelu_unfused": 1, "fwd_bn_relu": 1, "fwd_bn_relu_unfused": 1}
SHAPE_SETS = {"paper": paper_points, "models": model_layers,
              # A few test shapes, for checking the harness itself on a CPU.
              "smoke": lambda: [c for c in TEST_CASES if c.name in ("convnext_k7_pad3", "mobilenet_s2_k3",
                                                                     "tiles_k9_c72")]}
# Ceilings measured on the H200 (../shared/perf/README.md, 2026-11-29): elementwise
# read+write bandwidth and fp32 matmul at precision=HIGHEST.
H200_BANDWIDTH_GBS = 4177.0
H200_FP32_TFLOPS = 51.5
L2_BYTES = 60 * 2**20
# Each sample times back-to-back calls for at least this long, so that the wait for
# the last call (host dispatch, block_until_ready) is spread over many. At 2 ms, calls
# of 0.5-2 ms ran 1-3 per sample and measured 0.05-0.46 ms slower through JAX than
# the same kernels timed alone with CUDA events on the H200, the gap largest at one
# call per sample (docs/design-notes.md).
MIN_SAMPLE_SECONDS = 25e-3
MAX_CALLS_PER_SAMPLE = 100
# A function's timed samples stop at --samples or at MAX_TIMED_SECONDS of timed
# calls, whichever comes first, but never below MIN_SAMPLES. XLA's bf16 filter
# gradient takes 0.26-2.7 s a call on the 128x128x128x128 map on the H200, and 20
# samples of each made the 27-point bwd_filter run outlast a 10-minute device call;
# a median of 5 calls of 1 s or more is not what limits it.
MAX_TIMED_SECONDS = 6.0
MIN_SAMPLES = 5


def make_fn(mode, implementation, kwargs):
  """The jitted function that a mode times, taking (x, w, dy)."""
  conv = partial(depthwise_conv2d, implementation=implementation, **kwargs)
  if mode == "fwd":
    fn = lambda x, w, dy: conv(x, w)
  elif mode == "bwd_data":
    fn = lambda x, w, dy: jax.vjp(lambda x: conv(x, w), x)[1](dy)[0]
  elif mode == "bwd_filter":
    fn = lambda x, w, dy: jax.vjp(lambda w: conv(x, w), w)[1](dy)[0]
  elif mode == "fwd_bias_gelu":
    fn = lambda x, w, dy: conv(x, w, bias=w[0, 0, 0], activation="gelu")
  elif mode == "fwd_bias_gelu_unfused":
    fn = lambda x, w, dy: jax.nn.gelu(conv(x, w) + w[0, 0, 0], approximate=False)
  elif mode == "fwd_bn_relu":
    fn = lambda x, w, dy: conv(x, w, input_scale=w[0, 0, 0].astype(jnp.float32),
                               input_shift=w[-1, -1, 0].astype(jnp.float32), input_activation="relu")
  elif mode == "fwd_bn_relu_unfused":
    fn = lambda x, w, dy: conv(jax.nn.relu(x.astype(jnp.float32) * w[0, 0, 0].astype(jnp.float32)
                                           + w[-1, -1, 0].astype(jnp.float32)).astype(x.dtype), w)
  else:
    fn = lambda x, w, dy: jax.value_and_grad(lambda x, w: jnp.vdot(conv(x, w), dy).real, argnums=(0, 1))(x, w)
  return jax.jit(fn)


def conv_flops_and_bytes(case, dtype, mode, y_shape):
  """2*N*Ho*Wo*C*KH*KW FLOPs per pass; bytes of the pass's inputs read once and
  its output written once (the filter counted only where it is the output)."""
  ho, wo = y_shape[1], y_shape[2]
  flops = 2 * case.n * ho * wo * case.c * case.kh * case.kw * PASSES_PER_MODE[mode]
  itemsize = jnp.dtype(dtype).itemsize
  x_elems, y_elems = case.n * case.h * case.w * case.c, case.n * ho * wo * case.c
  elems = {"fwd": x_elems + y_elems, "bwd_data": y_elems + x_elems, "bwd_filter": x_elems + y_elems,
           "fwd+bwd": 2 * x_elems + 2 * y_elems + x_elems, "fwd_bias_gelu": x_elems + y_elems,
           "fwd_bias_gelu_unfused": x_elems + y_elems, "fwd_bn_relu": x_elems + y_elems,
           "fwd_bn_relu_unfused": x_elems + y_elems}[mode]
  return flops, elems * itemsize


def time_fn(fn, arg_sets, samples):
  """Median seconds per call of fn over rotating argument sets, the calls per sample,
  and the samples timed (at most `samples`; see MAX_TIMED_SECONDS)."""
  jax.block_until_ready(fn(*arg_sets[0]))  # compile

  def one_call(i):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*arg_sets[i % len(arg_sets)]))
    return time.perf_counter() - t0

  single = one_call(0)
  # Where calls are short, two more probes (also warm-up), and the fastest sets the
  # calls per sample: one slow probe (a host hiccup) once gave points of 0.35-1.1 ms
  # 5-6 calls a sample instead of 16-42, and those read 6-13% slow on the H200
  # (docs/design-notes.md). A call of 25 ms or more has had two
  # already (the compile call and the probe): XLA's filter gradient takes 0.3-1 s a
  # call at large k on the H200, and more probes would be more of its 25 calls a point.
  if single < MIN_SAMPLE_SECONDS:
    single = min(single, one_call(1), one_call(2))
  reps = max(1, min(MAX_CALLS_PER_SAMPLE, int(MIN_SAMPLE_SECONDS / max(single, 1e-6))))
  samples = min(samples, max(MIN_SAMPLES, int(MAX_TIMED_SECONDS / (single * reps))))
  times = []
  k = 0
  for _ in range(samples):
    t0 = time.perf_counter()
    out = None
    for _ in range(reps):
      out = fn(*arg_sets[k % len(arg_sets)])
      k += 1
    jax.block_until_ready(out)
    times.append((time.perf_counter() - t0) / reps)
  return statistics.median(times), reps, samples


def make_inputs(case, dtype, key, y_shape):
  x_bytes = case.n * case.h * case.w * case.c * jnp.dtype(dtype).itemsize
  copies = int(min(8, max(1, -(-4 * L2_BYTES // x_bytes))))
  sets = []
  for i in range(copies):
    kx, kw, ky = jax.random.split(jax.random.fold_in(key, i), 3)
    # Drawn in fp32 and rounded: uniform() drawn directly in bf16 gives multiples of
    # 2^-6, whose products and sums are exact in fp32, so every implementation agreed
    # bit for bit and the error gate below could not fail (it read 0 at every bf16 point).
    draw = lambda k, shape: jax.random.uniform(k, shape, jnp.float32, -1.0, 1.0).astype(dtype)
    x = draw(kx, (case.n, case.h, case.w, case.c))
    w = draw(kw, (case.kh, case.kw, 1, case.c))
    dy = draw(ky, y_shape)
    sets.append((x, w, dy))
  return sets


@jax.jit
def _leaf_error(u, v):
  u, v = u.astype(jnp.float32), v.astype(jnp.float32)
  return jnp.max(jnp.abs(u - v)), jnp.max(jnp.abs(v))


def relative_error(a, b):
  """Largest |a - b| over largest |b|, over every output leaf. Reduced on the device:
  at the paper sizes the host way copies two 268M-element outputs and reduces 4 GB of
  float64 on one core, seconds per point (estimated, not timed; the last H200 run
  spent about 15 s a point in all, of which the timed calls were a few)."""
  worst = 0.0
  for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    diff, scale = (float(t) for t in _leaf_error(u, v))
    worst = max(worst, diff / max(scale, 1e-30))
  return worst


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--mode", nargs="+", default=["fwd"], choices=MODES)
  parser.add_argument("--dtype", nargs="+", default=["float32"], choices=["float32", "float16", "bfloat16"])
  parser.add_argument("--shapes", nargs="+", default=["paper", "models"], choices=list(SHAPE_SETS))
  parser.add_argument("--ks", type=int, nargs="+", default=None, help="restrict the paper points to these k")
  parser.add_argument("--maps", nargs="+", default=None, metavar="NxHxWxC",
                      help="restrict the paper points to these feature maps, e.g. 128x64x64x256")
  parser.add_argument("--samples", type=int, default=20)
  parser.add_argument("--out", default="benchmarks/results")
  parser.add_argument("--tag", default="", help="suffix of the CSV file name")
  parser.add_argument("--resume", default=None, metavar="CSV",
                      help="append to this CSV from an earlier run, skipping the points it already holds")
  parser.add_argument("--skip-xla", action="store_true",
                      help="time jax_flashdwc only, with XLA's autotuning off (XLA then only gates each point): "
                           "for tuning, and for comparisons between our own passes; speedups are published from "
                           "runs that time XLA")
  parser.add_argument("--stop-after", type=float, default=None, metavar="SECONDS",
                      help="start no point once SECONDS have passed, or where the last point's wall time "
                           "would pass them; with --resume the next call times the rest (a GPU machine's "
                           "per-call limit would otherwise cut a point and its XLA autotuning short)")
  parser.add_argument("--compilation-cache", default=None, metavar="DIR",
                      help="JAX's persistent compilation cache; a later run with the same DIR (another call "
                           "on the GPU machine, DIR carried back) loads the compiled functions instead of "
                           "compiling and autotuning them again")
  parser.add_argument("--xla-autotune-cache", default=None, metavar="DIR",
                      help="XLA's per-fusion autotune results (--xla_gpu_per_fusion_autotune_cache_dir): read "
                           "where DIR holds them, written where not, so that a later run, or another mode at "
                           "the same points, reuses XLA's own choice of convolution algorithm instead of timing "
                           "every candidate again")
  parser.add_argument("--tall-filters", choices=["transposed", "direct"], default="transposed",
                      help="direct: run tall fp16/bf16 filters (SLaK's 51x5) without exchanging H and W, "
                           "the A/B of conv.TRANSPOSE_TALL_FILTERS")
  args = parser.parse_args(argv)
  conv_module.TRANSPOSE_TALL_FILTERS = args.tall_filters == "transposed"
  # With --skip-xla, XLA only computes the reference that gates each point, so its choice
  # of algorithm does not matter: autotuning it took most of a point's wall time (bf16
  # forward: 37-108 s a point at k = 51).
  use_caches(args.compilation_cache, args.xla_autotune_cache,
             ("--xla_gpu_autotune_level=0",) if args.skip_xla else ())

  cases, set_of_case = [], {}
  for name in args.shapes:
    fn = SHAPE_SETS[name]
    chosen = fn(tuple(args.ks)) if (name == "paper" and args.ks) else fn()
    if name == "paper" and args.maps:
      paper_maps = {f"{c.n}x{c.h}x{c.w}x{c.c}" for c in chosen}
      unknown = sorted(set(args.maps) - paper_maps)
      if unknown:
        parser.error(f"--maps: {unknown} are not paper maps; they are {sorted(paper_maps)}")
      chosen = [c for c in chosen if f"{c.n}x{c.h}x{c.w}x{c.c}" in args.maps]
    cases += chosen
    set_of_case.update((case.name, name) for case in chosen)
  prov = provenance()
  os.makedirs(args.out, exist_ok=True)
  stamp = prov["date"].replace(":", "").replace("-", "")
  path = os.path.join(args.out, f"dwconv_{'_'.join(m.replace('+', '') for m in args.mode)}_{stamp}{args.tag}.csv")
  fields = ["mode", "dtype", "case", "n", "h", "w", "c", "kh", "kw", "strides", "tall_filters", "flashdwc_ms", "xla_ms",
            "flashdwc_tflops", "xla_tflops", "flashdwc_gbs", "speedup", "rel_err", "gate", "reps",
            "samples", "xla_samples", "gpu", "driver", "jax_version", "commit", "date"]
  rows = []
  # A run cut short (a time limit on the GPU machine) goes on where it stopped: the
  # points already in the CSV are kept for the summary and not timed again.
  if args.resume:
    path = args.resume
    if os.path.exists(path):
      with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
  done = {(r["mode"], r["dtype"], r["case"]) for r in rows}
  if rows:  # a resumed CSV keeps its own columns (older ones lack the sample counts)
    fields = list(rows[0].keys())
  key = jax.random.key(int.from_bytes(os.urandom(4), "little"))
  run_start, last_point_seconds, stopped = time.perf_counter(), 0.0, False

  def out_of_time():
    # The last point's wall time stands for the next one's: points come map by map in
    # growing k, so it is an underestimate within a map and an overestimate across.
    return (args.stop_after is not None and
            time.perf_counter() - run_start + last_point_seconds > args.stop_after)

  with open(path, "a" if rows else "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
    if not rows:
      writer.writeheader()
    for mode in args.mode:
      for dtype_name in args.dtype:
        dtype = jnp.dtype(dtype_name)
        # Relative max error allowed between the two implementations before the
        # comparison is refused: fp32 sums differ in order; half types round once.
        gate_tol = (1e-4 if mode == "fwd" else 1e-3) if dtype == jnp.float32 else 2e-2
        for case in cases:
          if (mode, dtype_name, case.name) in done:
            continue
          if out_of_time():
            if not stopped:
              print(f"stopping after {time.perf_counter() - run_start:.0f} s (--stop-after {args.stop_after:g}); "
                    f"--resume {path} times the rest", flush=True)
            stopped = True
            break
          kwargs = dict(strides=case.strides, padding=case.padding, kernel_dilation=case.dilation)
          ours, xla = make_fn(mode, None, kwargs), make_fn(mode, "xla", kwargs)
          y_shape = jax.eval_shape(partial(depthwise_conv2d, **kwargs),
                                   jax.ShapeDtypeStruct(case.x_shape, dtype),
                                   jax.ShapeDtypeStruct(case.kernel_shape, dtype)).shape
          point_start = time.perf_counter()
          arg_sets = make_inputs(case, dtype, jax.random.fold_in(key, len(rows)), y_shape)
          err = relative_error(ours(*arg_sets[0]), xla(*arg_sets[0]))
          gate = "ok" if err <= gate_tol else "FAILED"
          t_ours, reps, samples = time_fn(ours, arg_sets, args.samples)
          t_xla, _, xla_samples = (float("nan"), 0, 0) if args.skip_xla else time_fn(xla, arg_sets, args.samples)
          flops, nbytes = conv_flops_and_bytes(case, dtype, mode, y_shape)
          row = {
              "mode": mode, "dtype": dtype_name, "case": case.name, "n": case.n, "h": case.h, "w": case.w,
              "c": case.c, "kh": case.kh, "kw": case.kw, "strides": str(case.strides),
              "tall_filters": args.tall_filters,
              "flashdwc_ms": f"{t_ours * 1e3:.4f}", "xla_ms": f"{t_xla * 1e3:.4f}",
              "flashdwc_tflops": f"{flops / t_ours / 1e12:.3f}", "xla_tflops": f"{flops / t_xla / 1e12:.3f}",
              "flashdwc_gbs": f"{nbytes / t_ours / 1e9:.1f}",
              "speedup": f"{t_xla / t_ours:.3f}" if gate == "ok" and not args.skip_xla else "",
              "rel_err": f"{err:.2e}", "gate": gate, "reps": reps,
              "samples": samples, "xla_samples": xla_samples, **prov,
          }
          writer.writerow(row)
          f.flush()
          rows.append(row)
          print(f"{mode:10s} {dtype_name:8s} {case.name:32s} ours {t_ours*1e3:9.3f} ms "
                f"{flops / t_ours / 1e12:7.2f} TF/s {nbytes / t_ours / 1e9:7.0f} GB/s | xla {t_xla*1e3:9.3f} ms "
                f"| x{t_xla / t_ours:6.2f} err {err:.1e} {gate} ({time.perf_counter() - point_start:.0f} s)",
                flush=True)
          last_point_seconds = time.perf_counter() - point_start

  print(f"\nwrote {path}  ({prov['gpu']}, driver {prov['driver']}, jax {prov['jax_version']}, "
        f"commit {prov['commit']})")
  print_summary(rows, set_of_case)
  return 0 if all(r["gate"] == "ok" for r in rows) else 1


def print_summary(rows, set_of_case):
  by_group = {}
  for r in rows:
    group = set_of_case.get(r["case"], "other")  # "other": a resumed CSV's point outside --shapes
    by_group.setdefault((r["mode"], r["dtype"], group), []).append(r)
  print(f"{'mode':10s} {'dtype':8s} {'set':7s} {'points':>6s} {'geomean x':>9s} {'min x':>7s} {'max TF/s':>8s}")
  for (mode, dtype, group), rs in by_group.items():
    speedups = [float(r["speedup"]) for r in rs if r["speedup"]]
    if not speedups:
      continue
    geo = float(np.exp(np.mean(np.log(speedups))))
    print(f"{mode:10s} {dtype:8s} {group:7s} {len(rs):6d} {geo:9.2f} {min(speedups):7.2f} "
          f"{max(float(r['flashdwc_tflops']) for r in rs):8.2f}")


if __name__ == "__main__":
  sys.exit(main())
