"""Benchmark: every depthwise layer of the model registry, all three passes, against XLA.

The registry is tests/shapes.py's MODEL_LAYERS (MobileNetV2/V3, EfficientNet-B0/B3,
ConvNeXt-T, VAN-B0, UniRepLKNet-T, InceptionNeXt-T, RepLKNet-31B, SLaK-T,
ConvMixer-1536/20, Mamba's conv1d). For each layer, pass (fwd: y from x and w;
dx: the input gradient from dy and w; dw: the filter gradient from x and dy) and
dtype, the library's kernels (implementation="flashdwc") and XLA's conv
(implementation="xla") are timed in the same run on the same device.

Timing is on the device, not through host dispatch: one jitted executable applies the
pass to R distinct input buffers (R chosen so that a call lasts about 3 ms, and the
buffers outnumber the L2), so its R kernels run back to back and the host's dispatch
and synchronization, paid once a call, are spread over R. The time of a pass is the
median over several calls, divided by R, after a warm-up call. Inputs are random
normal, never zeros. The two results of rep 0 (from the warm-up calls) are compared, and
a disagreement beyond the dtype's tolerance is reported, not a speedup.

The gradients are the linear transposes of the forward in one operand, so each pass is
the one kernel the library runs for it (bwd_data, bwd_filter), and XLA's is the conv
XLA emits for the same gradient.

`route` is what implementation=None runs for the pass (jax_flashdwc/routing.py), and
`auto_speedup` is xla_ms over the time of that choice: the user's speedup under the
default.

  python benchmarks/bench_layers.py --dtype bfloat16 float32 --out benchmarks/results
  python benchmarks/bench_layers.py --models convnext_t --passes fwd --dtype float32   # one model
  python benchmarks/bench_layers.py ... --resume build/layers.csv --stop-after 500      # across calls
  python benchmarks/bench_layers.py ... --xla-autotune-cache build/xla-autotune        # keep XLA's choices
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from shapes import MODEL_LAYERS  # noqa: E402

from jax_flashdwc import _dilation, conv as conv_module, depthwise_conv2d  # noqa: E402
from jax_flashdwc._geometry import make_geometry  # noqa: E402
from jax_caches import use_caches  # noqa: E402
from provenance import provenance  # noqa: E402

PASSES = ("fwd", "dx", "dw")
# A call of the executable lasts about this long, so that the host's one dispatch and
# one synchronization per call (about 40-60 us) stay a few percent of it.
TARGET_CALL_SECONDS = 3e-3
MIN_REPS, MAX_REPS = 4, 64
# The R input sets together at least this large, so that a rep does not find its
# operands in the 60 MB L2 that the rep before it left there.
MIN_ROTATION_BYTES = 160 * 2**20
MAX_ROTATION_BYTES = 8 * 2**30
TIMED_CALLS = 9
# Relative error (max |a - b| over max |b|) above which ours and XLA's disagree.
TOLERANCE = {"float32": 1e-4, "bfloat16": 3e-2, "float16": 5e-3}
# Rough rates for choosing R before anything is timed (a lower bound on the time).
EST_BANDWIDTH = 3.5e12
EST_FLOPS = 30e12

FIELDS = ["model", "layer", "shape", "kernel", "stride", "dilation", "padding", "pass", "dtype", "ours_ms",
          "xla_ms", "speedup", "route", "auto_speedup", "ours_gbs", "ours_tflops", "reps", "max_rel_err", "gpu",
          "driver", "jax_version", "commit", "date"]


def pass_function(pass_name, case, implementation, dtype):
  """(jitted f taking R operand pairs, the shapes of one pair, the index of the operand
  all pairs share or None) for one pass."""
  conv = lambda x, w: depthwise_conv2d(x, w, implementation=implementation, **case.conv_kwargs())
  x_spec = jax.ShapeDtypeStruct(case.x_shape, dtype)
  w_spec = jax.ShapeDtypeStruct(case.kernel_shape, dtype)
  y_spec = jax.eval_shape(conv, x_spec, w_spec)
  shared = 1  # the filter, shared by the reps of fwd and dx as in a model
  if pass_name == "fwd":
    one, operands = conv, (x_spec, w_spec)
  elif pass_name == "dx":
    def one(dy, w):
      (dx,) = jax.linear_transpose(lambda x: conv(x, w), x_spec)(dy)
      return dx
    operands = (y_spec, w_spec)
  else:
    def one(x, dy):
      (dw,) = jax.linear_transpose(lambda w: conv(x, w), w_spec)(dy)
      return dw
    operands, shared = (x_spec, y_spec), None
  fn = jax.jit(lambda pairs: [one(a, b) for a, b in pairs])
  return fn, operands, shared


def pass_cost(pass_name, case, dtype):
  """(bytes that must move, flops) of one pass."""
  geometry = make_geometry(jax.ShapeDtypeStruct(case.x_shape, dtype),
                           jax.ShapeDtypeStruct(case.kernel_shape, dtype), case.strides, case.padding,
                           case.dilation)
  ho, wo = geometry.output_hw((case.h, case.w), (case.kh, case.kw))
  size = jnp.dtype(dtype).itemsize
  x_bytes, y_bytes = case.n * case.h * case.w * case.c * size, case.n * ho * wo * case.c * size
  w_bytes = case.kh * case.kw * case.c * size
  flops = 2 * case.n * ho * wo * case.c * case.kh * case.kw
  return x_bytes + y_bytes + w_bytes, flops


def random_operands(specs, shared, reps, key):
  pairs = []
  for r in range(reps):
    pair = []
    for i, spec in enumerate(specs):
      if i == shared and r > 0:
        pair.append(pairs[0][i])
      else:
        k = jax.random.fold_in(key, r * len(specs) + i)
        pair.append(jax.random.normal(k, spec.shape, jnp.float32).astype(spec.dtype))
    pairs.append(tuple(pair))
  return jax.block_until_ready(pairs)


def time_calls(fn, pairs, calls=TIMED_CALLS):
  """(median seconds a pass, the first rep's result of the warm-up call)."""
  first = jax.block_until_ready(fn(pairs))[0]  # warm-up: compile, autotune, module load
  times = []
  for _ in range(calls):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(pairs))
    times.append(time.perf_counter() - t0)
  return statistics.median(times) / len(pairs), first


def max_rel_err(a, b):
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  if not np.all(np.isfinite(a)):
    return math.inf
  return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def choose_reps(pass_name, case, dtype):
  nbytes, flops = pass_cost(pass_name, case, dtype)
  estimate = max(nbytes / EST_BANDWIDTH, flops / EST_FLOPS)
  reps = math.ceil(TARGET_CALL_SECONDS / max(estimate, 1e-7))
  reps = max(reps, math.ceil(MIN_ROTATION_BYTES / nbytes))
  reps = min(reps, max(1, MAX_ROTATION_BYTES // nbytes))
  return int(np.clip(reps, MIN_REPS, MAX_REPS))


def measure(layer, pass_name, dtype, key):
  case = layer.case
  reps = choose_reps(pass_name, case, dtype)
  ours_fn, specs, shared = pass_function(pass_name, case, "flashdwc", dtype)
  xla_fn, _, _ = pass_function(pass_name, case, "xla", dtype)
  auto_fn, _, _ = pass_function(pass_name, case, None, dtype)
  pairs = random_operands(specs, shared, reps, key)
  # What implementation=None runs, read off its lowering: our custom calls or XLA's conv.
  route = "flashdwc" if "flashdwc_" in auto_fn.lower(pairs[:1]).as_text() else "xla"
  # Rep 0's results come from the timed executables' warm-up calls: a separate
  # one-rep executable per side would cost two more compilations a row.
  ours, ours_first = time_calls(ours_fn, pairs)
  xla, xla_first = time_calls(xla_fn, pairs)
  err = max_rel_err(ours_first, xla_first)
  del pairs, ours_first, xla_first
  nbytes, flops = pass_cost(pass_name, case, dtype)
  chosen = xla if route == "xla" else ours
  return {
      "ours_ms": f"{ours * 1e3:.5f}", "xla_ms": f"{xla * 1e3:.5f}", "speedup": f"{xla / ours:.3f}",
      "route": route, "auto_speedup": f"{xla / chosen:.3f}",
      "ours_gbs": f"{nbytes / ours / 1e9:.1f}", "ours_tflops": f"{flops / ours / 1e12:.2f}",
      "reps": reps, "max_rel_err": f"{err:.2e}", "ok": err <= TOLERANCE[str(jnp.dtype(dtype))],
  }


def plot(path):
  """speedup over XLA per layer and pass, one panel per dtype, next to the CSV."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  with open(path) as f:
    rows = list(csv.DictReader(f))
  dtypes = sorted({r["dtype"] for r in rows})
  width = max(14, 0.12 * max(sum(r["dtype"] == d for r in rows) / 3 for d in dtypes))
  fig, axes = plt.subplots(len(dtypes), 1, figsize=(width, 4.5 * len(dtypes)), squeeze=False)
  colors = dict(zip(PASSES, ("tab:blue", "tab:orange", "tab:green")))
  for ax, dtype in zip(axes[:, 0], dtypes):
    sub = [r for r in rows if r["dtype"] == dtype]
    layers = list(dict.fromkeys(f"{r['model']}/{r['layer']}" for r in sub))
    for i, pass_name in enumerate(PASSES):
      for route in ("flashdwc", "xla"):
        xs, ys = [], []
        for r in sub:
          if r["pass"] == pass_name and r.get("route", "flashdwc") == route:
            xs.append(layers.index(f"{r['model']}/{r['layer']}") + (i - 1) * 0.27)
            ys.append(float(r["speedup"]))
        # Hatched: passes that implementation=None sends to XLA's conv (routing.py).
        ax.bar(xs, ys, width=0.27, color=colors[pass_name], alpha=1.0 if route == "flashdwc" else 0.35,
               hatch=None if route == "flashdwc" else "//",
               label=pass_name if route == "flashdwc" else f"{pass_name}, routed to XLA")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(layers)))
    ax.set_xticklabels(layers, rotation=75, ha="right", fontsize=7)
    ax.set_xlim(-0.7, len(layers) - 0.3)
    ax.set_ylabel("speedup: XLA time / ours")
    commits = ", ".join(sorted({r["commit"] for r in sub}))
    ax.set_title(f"{dtype}, {sub[0]['gpu']}, jax {sub[0]['jax_version']}, commits {commits}")
    ax.legend()
  fig.tight_layout()
  out = os.path.splitext(path)[0] + ".png"
  fig.savefig(out, dpi=110)
  print(f"wrote {out}")


def reroute(path):
  """Rewrites the CSV's route and auto_speedup columns from routing.py's current rule
  (the user's speedup under implementation=None: 1 where the rule picks XLA, whose
  time the row measured, else the measured speedup)."""
  with open(path) as f:
    rows = list(csv.DictReader(f))
  layers = {(l.model, l.layer): l.case for l in MODEL_LAYERS}
  for row in rows:
    case, dtype = layers[(row["model"], row["layer"])], jnp.dtype(row["dtype"])
    x = jax.ShapeDtypeStruct(case.x_shape, dtype)
    geometry = make_geometry(x, jax.ShapeDtypeStruct(case.kernel_shape, dtype), case.strides, case.padding,
                             case.dilation)
    row["route"] = conv_module.route_under_none(row["pass"], x, (case.kh, case.kw), geometry)
    row["auto_speedup"] = "1.000" if row["route"] == "xla" else row["speedup"]
  with open(path, "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=FIELDS)
    writer.writeheader()
    writer.writerows(rows)


def row_key(row):
  return (row["model"], row["layer"], row["pass"], row["dtype"])


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--dtype", nargs="+", default=["bfloat16", "float32"],
                      choices=["float32", "bfloat16", "float16"])
  parser.add_argument("--passes", nargs="+", default=list(PASSES), choices=PASSES)
  parser.add_argument("--models", nargs="+", default=None, help="only these models of the registry")
  parser.add_argument("--layers", nargs="+", default=None, help="only layers whose model/layer name holds one")
  parser.add_argument("--out", default="benchmarks/results")
  parser.add_argument("--name", default=None, help="CSV file name (default: layers_<gpu>.csv)")
  parser.add_argument("--resume", default=None, metavar="CSV", help="append to this CSV, skipping its rows")
  parser.add_argument("--stop-after", type=float, default=None, metavar="SECONDS",
                      help="start no layer after this many seconds")
  parser.add_argument("--compilation-cache", default=None, metavar="DIR")
  parser.add_argument("--xla-autotune-cache", default=None, metavar="DIR",
                      help="XLA's per-fusion autotune results (--xla_gpu_per_fusion_autotune_cache_dir): read "
                           "where DIR holds them, written where not; carried to the next call, they spare "
                           "XLA's timing of every conv algorithm again")
  parser.add_argument("--dilation", choices=["subgrid", "direct"], default="subgrid",
                      help="dilated stride-1 problems as the library runs them (sub-grids, or residue classes in "
                           "place on the register-filter kernel) or on the direct kernels")
  parser.add_argument("--plot", default=None, metavar="CSV", help="only draw CSV's plot")
  parser.add_argument("--reroute", default=None, metavar="CSV",
                      help="only refill CSV's route and auto_speedup columns from routing.py")
  args = parser.parse_args(argv)
  if args.reroute or args.plot:
    if args.reroute:
      reroute(args.reroute)
    plot(args.plot or args.reroute)
    return 0
  _dilation.ENABLED = args.dilation == "subgrid"
  use_caches(args.compilation_cache, args.xla_autotune_cache)

  prov = provenance()
  gpu_tag = prov["gpu"].replace("NVIDIA ", "").replace(" ", "_").lower()
  path = args.resume or os.path.join(args.out, args.name or f"layers_{gpu_tag}.csv")
  done = set()
  if args.resume and os.path.exists(path):
    with open(path) as f:
      done = {row_key(r) for r in csv.DictReader(f)}
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  new_file = not os.path.exists(path) or not args.resume
  start = time.perf_counter()
  key = jax.random.key(0)
  bad = []
  with open(path, "w" if new_file else "a", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=FIELDS)
    if new_file:
      writer.writeheader()
    layers = [l for l in MODEL_LAYERS if (args.models is None or l.model in args.models)
              and (args.layers is None or any(s in l.case.name for s in args.layers))]
    for dtype in args.dtype:
      for layer in layers:
        for pass_name in args.passes:
          row = {"model": layer.model, "layer": layer.layer, "pass": pass_name, "dtype": dtype}
          if row_key(row) in done:
            continue
          if args.stop_after is not None and time.perf_counter() - start > args.stop_after:
            print(f"stopped after {time.perf_counter() - start:.0f} s: --resume {path} goes on")
            return 0
          c = layer.case
          key, sub = jax.random.split(key)
          result = measure(layer, pass_name, jnp.dtype(dtype), sub)
          ok = result.pop("ok")
          row.update(result, shape=f"{c.n}x{c.h}x{c.w}x{c.c}", kernel=f"{c.kh}x{c.kw}", stride=c.strides,
                     dilation=c.dilation, padding=c.padding if isinstance(c.padding, str) else "explicit",
                     **prov)
          writer.writerow(row)
          f.flush()
          flag = "" if ok else "  DISAGREES WITH XLA"
          print(f"{dtype:8s} {pass_name:3s} {c.name:55s} ours {float(row['ours_ms']):8.4f} ms  "
                f"xla {float(row['xla_ms']):8.4f} ms  x{float(row['speedup']):6.2f}  route {row['route']}{flag}")
          if not ok:
            bad.append(c.name)
  print(f"\nwrote {path} ({prov['gpu']}, driver {prov['driver']}, jax {prov['jax_version']}, "
        f"commit {prov['commit']}) in {time.perf_counter() - start:.0f} s")
  if bad:
    print(f"{len(bad)} results disagree with XLA: {bad}")
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
