"""Benchmark: the depthwise 1-D (causal) convolution on Mamba-style shapes.

Three implementations of y = silu(conv_causal(x, w) + b), x (N, L, C), w (K, 1, C),
are timed in the same run:
  flashdwc-1d  this library's 1-D kernels (PLAIN_ON_1D_KERNELS = True);
  flashdwc-2d  the library's 2-D kernels with H = 1 (PLAIN_ON_1D_KERNELS = False);
  xla          implementation="xla": lax.conv_general_dilated plus XLA's fusions.
Passes: fwd (y), dx (vjp in x), dw (vjp in w and b), fwd+bwd (value and gradient
in x, w and b of sum(y * dy)), and the one-token decoding step (`update`). Each shape
also gets a `copy` row: XLA's negation of x, one fusion reading x and writing y, timed
the same way, so that each pass's bandwidth also compares with a copy of the same bytes
inside the same kind of executable (the harness's copy kernel runs alone).

Timing: one jitted executable applies the op R times to R distinct input buffers
(together larger than the L2 cache; R from copies_for, about 2 ms of forward a call)
and returns all R results, so host dispatch is paid once per R calls; after warm-up, the median of --repeats executions,
divided by R. Bytes that must move (s = itemsize, T = N * L tokens): fwd reads x
and writes y, 2 T C s; dx reads x (to recompute the SiLU's derivative) and dy and
writes dx, 3 T C s; dw reads x and dy, 2 T C s; fwd+bwd 5 T C s. Achieved TB/s =
bytes / time, and its fraction of the card's copy bandwidth (--copy-tbs, 4.18 TB/s
measured on the H200). Every point first checks each implementation's result
against XLA's (rel_err column).

Writes conv1d.csv (with GPU name, driver, jax version and commit columns) and
conv1d.png under --out.

  python benchmarks/bench_conv1d.py --out build/bench-conv1d            # every point
  python benchmarks/bench_conv1d.py --out build/b-k4 --kernel-sizes 4  # a third of them
  python benchmarks/bench_conv1d.py --out build/conv1d-smoke --smoke       # harness check on a CPU
  python benchmarks/bench_conv1d.py --out build/c1d --resume --stop-after 400  # across capped calls

The CSV is rewritten after every (shape, pass), so a run cut at a time limit keeps what
it measured; --resume skips the (shape, pass) pairs the CSV under --out already holds
for every requested implementation.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from jax_flashdwc import conv1d as conv1d_module
from jax_flashdwc import depthwise_conv1d, depthwise_conv1d_update
from provenance import provenance  # noqa: E402

IMPLEMENTATIONS = ("flashdwc-1d", "flashdwc-2d", "xla")
MODES = ("fwd", "dx", "dw", "fwd+bwd")
PASSES = {"fwd": 2, "dx": 3, "dw": 2, "fwd+bwd": 5, "copy": 2}
# (N, L): 16k, 32k and 64k tokens.
TOKEN_SHAPES = ((8, 2048), (8, 4096), (16, 4096))
CHANNELS = (1536, 2560, 5120)
KERNEL_SIZES = (2, 3, 4)
SMOKE = [((2, 64), 64, 4), ((1, 96), 40, 3)]


def layer(impl):
  """y = silu(conv_causal(x, w) + b) by one implementation."""
  implementation = "xla" if impl == "xla" else None

  def f(x, w, b):
    return depthwise_conv1d(x, w, bias=b, activation="silu", implementation=implementation)

  return f


def pass_fn(mode, impl):
  """The function of one pass: (x, w, b, dy) -> outputs."""
  f = layer(impl)
  if mode == "fwd":
    return lambda x, w, b, dy: f(x, w, b)
  if mode == "dx":
    return lambda x, w, b, dy: jax.vjp(lambda x: f(x, w, b), x)[1](dy)[0]
  if mode == "dw":
    return lambda x, w, b, dy: jax.vjp(lambda w, b: f(x, w, b), w, b)[1](dy)
  if mode == "fwd+bwd":
    loss = lambda x, w, b, dy: jnp.sum(f(x, w, b).astype(jnp.float32) * dy.astype(jnp.float32))
    return jax.value_and_grad(loss, argnums=(0, 1, 2))
  if mode == "copy":
    return lambda x, w, b, dy: -x
  raise ValueError(mode)


def repeated(fn, impl):
  """One executable applying fn to each of R input sets, returning every result."""
  def run(xs, ws, bs, dys):
    return [fn(x, w, b, dy) for x, w, b, dy in zip(xs, ws, bs, dys)]

  jitted = jax.jit(run)
  if impl == "xla":
    return jitted

  def on_route(*args):
    # The route is read when tracing: trace (and compile) with this one chosen.
    saved = conv1d_module.PLAIN_ON_1D_KERNELS
    conv1d_module.PLAIN_ON_1D_KERNELS = impl == "flashdwc-1d"
    try:
      return jitted(*args)
    finally:
      conv1d_module.PLAIN_ON_1D_KERNELS = saved

  return on_route


def time_executable(fn, args, repeats, warmup=2):
  for _ in range(warmup):
    jax.block_until_ready(fn(*args))
  samples = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    samples.append(time.perf_counter() - start)
  return statistics.median(samples)


def rel_err(a, b):
  a = np.asarray(jnp.asarray(a, jnp.float32), np.float64)
  b = np.asarray(jnp.asarray(b, jnp.float32), np.float64)
  return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def copies_for(tokens, channels, dtype, call_seconds=2e-3, max_copies=32, max_bytes=12e9):
  """R for one shape: enough input sets that the fastest pass (the forward, assumed at
  2.5 TB/s) runs about call_seconds a call, so the host's dispatch and sync, about
  40-60 µs a call, stay near 2% of it (6 sets at 16k x 1536 are about 0.3 ms of
  forward, of which that is 13-20%); at least 2, at most max_copies, and the sets
  (x and dy) within max_bytes."""
  set_bytes = 2 * tokens * channels * jnp.dtype(dtype).itemsize
  wanted = math.ceil(call_seconds / (set_bytes / 2.5e12))
  return int(max(2, min(wanted, max_copies, max_bytes // set_bytes)))


def make_inputs(key, n, length, c, k, dtype, copies):
  sets = []
  for i in range(copies):
    kx, kw, kb, kd = jax.random.split(jax.random.fold_in(key, i), 4)
    sets.append((jax.random.uniform(kx, (n, length, c), dtype, -1, 1),
                 jax.random.uniform(kw, (k, 1, c), dtype, -0.5, 0.5),
                 jax.random.uniform(kb, (c,), dtype, -0.5, 0.5),
                 jax.random.uniform(kd, (n, length, c), dtype, -1, 1)))
  return [list(t) for t in zip(*sets)]


def bench_update(dtype, steps, repeats, batch=64, channels=5120, k=4, implementation="xla"):
  """The decoding step on (batch, C) by one implementation ("xla": the jnp step XLA
  fuses; "flashdwc": the 1-D forward kernel): (seconds a step, bytes a step, the
  outputs). One executable decodes `steps` tokens in a chain, each step's state the
  previous step's new state, as a generation loop does. Each step's (y, state) passes
  an optimization barrier: without it XLA sees through the chain of shifts (every
  state is a window of the inputs) and fuses all steps into one convolution, which
  is not what decoding runs. Independent calls returning their own buffers instead
  time the host's handling of the outputs (21.8 µs a call at 32 calls, H100)."""
  key = jax.random.key(7)
  xs = jax.random.normal(key, (steps, batch, channels), dtype)
  state = jax.random.normal(jax.random.fold_in(key, 1), (batch, k - 1, channels), dtype)
  w = jax.random.normal(jax.random.fold_in(key, 2), (k, 1, channels), dtype)
  b = jax.random.normal(jax.random.fold_in(key, 3), (channels,), dtype)

  def decode(xs, state):
    ys = []
    for t in range(steps):
      y, state = jax.lax.optimization_barrier(
          depthwise_conv1d_update(xs[t], state, w, b, "silu", implementation))
      ys.append(y)
    return jnp.stack(ys), state

  fn = jax.jit(decode)
  seconds = time_executable(fn, (xs, state), repeats) / steps
  item = jnp.dtype(dtype).itemsize
  moved = (2 * batch * channels + 2 * batch * (k - 1) * channels) * item
  return seconds, moved, fn(xs, state)


def plot(rows, path, copy_tbs):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, len(MODES), figsize=(5 * len(MODES), 4.5), sharey=True)
  colors = {"flashdwc-1d": "tab:red", "flashdwc-2d": "tab:orange", "xla": "tab:blue"}
  points = sorted({(r["tokens"], r["C"], r["K"]) for r in rows if r["mode"] in MODES})
  labels = [f"{t // 1024}k,{c},{k}" for t, c, k in points]
  for ax, mode in zip(np.atleast_1d(axes), MODES):
    for j, impl in enumerate(IMPLEMENTATIONS):
      by_point = {(r["tokens"], r["C"], r["K"]): r["frac_copy"] for r in rows if r["mode"] == mode and
                  r["impl"] == impl}
      xs = np.arange(len(points)) + (j - 1) * 0.27
      ax.bar(xs, [by_point.get(p, 0.0) for p in points], width=0.27, color=colors[impl], label=impl)
    ax.axhline(0.8, color="k", lw=0.8, ls="--")
    ax.set_title(f"{mode}")
    ax.set_xticks(np.arange(len(points)), labels, rotation=90, fontsize=7)
  np.atleast_1d(axes)[0].set_ylabel(f"fraction of copy bandwidth ({copy_tbs} TB/s)")
  np.atleast_1d(axes)[0].legend(fontsize=8)
  fig.suptitle(f"depthwise causal conv1d + bias + SiLU, {rows[0]['dtype']}, {rows[0]['gpu']} "
               "(tokens, C, K)")
  fig.tight_layout()
  fig.savefig(path, dpi=120)


FIELDS = ["tokens", "N", "L", "C", "K", "dtype", "mode", "impl", "ms", "tb_s", "frac_copy", "speedup_vs_xla",
          "rel_err", "gpu", "driver", "jax_version", "commit", "date"]
INT_FIELDS = ("tokens", "N", "L", "C", "K")
FLOAT_FIELDS = ("ms", "tb_s", "frac_copy", "speedup_vs_xla", "rel_err")


def read_rows(path):
  """The rows of an earlier run's CSV, numbers as numbers; none if it does not exist."""
  if not os.path.exists(path):
    return []
  with open(path) as f:
    rows = list(csv.DictReader(f))
  for row in rows:
    row.update({k: int(row[k]) for k in INT_FIELDS})
    row.update({k: float(row[k]) for k in FLOAT_FIELDS})
  return rows


def write_rows(path, rows):
  with open(path, "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=FIELDS)
    writer.writeheader()
    writer.writerows(rows)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--out", required=True, help="directory for conv1d.csv and conv1d.png")
  parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
  parser.add_argument("--copies", type=int, default=None,
                      help="R: distinct input sets per executable (default: copies_for(), about 2 ms of forward a call)")
  parser.add_argument("--repeats", type=int, default=7)
  parser.add_argument("--copy-tbs", type=float, default=4.18, help="the card's copy bandwidth, TB/s")
  parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
  parser.add_argument("--impls", nargs="+", default=list(IMPLEMENTATIONS), choices=IMPLEMENTATIONS)
  parser.add_argument("--kernel-sizes", nargs="+", type=int, default=list(KERNEL_SIZES))
  parser.add_argument("--channels", nargs="+", type=int, default=list(CHANNELS))
  parser.add_argument("--quick", action="store_true", help="K = 4 and C in (1536, 5120) only")
  parser.add_argument("--smoke", action="store_true", help="tiny shapes: checks the harness on a CPU")
  parser.add_argument("--resume", action="store_true", help="keep and skip what --out's conv1d.csv holds")
  parser.add_argument("--stop-after", type=float, default=None, metavar="SECONDS",
                      help="start no new (shape, pass) after this many seconds")
  args = parser.parse_args(argv)
  start = time.perf_counter()
  os.makedirs(args.out, exist_ok=True)
  dtype = jnp.dtype(args.dtype)
  prov = provenance()
  if args.smoke:
    points = SMOKE
    args.copies, args.repeats = 2, 2
  else:
    channels = (1536, 5120) if args.quick else args.channels
    kernel_sizes = (4,) if args.quick else args.kernel_sizes
    points = [(nl, c, k) for nl in TOKEN_SHAPES for c in channels for k in kernel_sizes]
  path = os.path.join(args.out, "conv1d.csv")
  rows = read_rows(path) if args.resume else []
  have = {(r["tokens"], r["C"], r["K"], r["dtype"], r["mode"], r["impl"]) for r in rows}
  out_of_time = lambda: args.stop_after is not None and time.perf_counter() - start > args.stop_after
  key = jax.random.key(0)
  # The decoding step first: a few seconds, and never starved by --stop-after.
  batch, channels = (4, 64) if args.smoke else (64, 5120)
  update_ref = None
  for impl, implementation in (("xla", "xla"), ("flashdwc-1d", "flashdwc")):
    if any(r["mode"] == "update" and r["impl"] == impl and r["dtype"] == str(dtype) for r in rows):
      continue
    seconds, moved, out = bench_update(dtype, 4 if args.smoke else 128, args.repeats, batch=batch,
                                       channels=channels, implementation=implementation)
    if update_ref is None:
      update_ref = out
    err = max(rel_err(a, b) for a, b in zip(out, update_ref))
    print(f"update (decode one token, batch {batch} x {channels}, K = 4, {dtype}) {impl}: "
          f"{seconds * 1e6:.2f} us a step (rel_err vs the first timed: {err:.1e})")
    rows.append({"tokens": batch, "N": batch, "L": 1, "C": channels, "K": 4, "dtype": str(dtype),
                 "mode": "update", "impl": impl, "ms": seconds * 1e3, "tb_s": moved / seconds / 1e12,
                 "frac_copy": moved / seconds / 1e12 / args.copy_tbs, "rel_err": err,
                 "speedup_vs_xla": float("nan"), **prov})
    write_rows(path, rows)
  for (n, length), c, k in points:
    todo = [m for m in args.modes
            if any((n * length, c, k, str(dtype), m, impl) not in have for impl in args.impls)]
    if not todo or out_of_time():
      continue
    copies = args.copies or copies_for(n * length, c, dtype)
    data = make_inputs(key, n, length, c, k, dtype, copies)
    if (n * length, c, k, str(dtype), "copy", "xla") not in have:
      seconds = time_executable(repeated(pass_fn("copy", "xla"), "xla"), data, args.repeats, warmup=1) / copies
      moved = PASSES["copy"] * n * length * c * dtype.itemsize
      rows.append({"tokens": n * length, "N": n, "L": length, "C": c, "K": k, "dtype": str(dtype), "mode": "copy",
                   "impl": "xla", "ms": seconds * 1e3, "tb_s": moved / seconds / 1e12,
                   "frac_copy": moved / seconds / 1e12 / args.copy_tbs, "rel_err": 0.0,
                   "speedup_vs_xla": float("nan"), **prov})
      print(f"{n * length:>6} C={c:<5} K={k} copy     xla (x -> -x) {seconds * 1e3:8.3f} ms "
            f"{moved / seconds / 1e12:5.2f} TB/s", flush=True)
    for mode in todo:
      if out_of_time():
        break
      rows = [r for r in rows if (r["tokens"], r["C"], r["K"], r["dtype"], r["mode"]) != (n * length, c, k,
                                                                                          str(dtype), mode)]
      fns = {impl: repeated(pass_fn(mode, impl), impl) for impl in args.impls}
      # The first call (also a warm-up) gives the results checked against XLA's.
      first = {impl: jax.tree.leaves(jax.block_until_ready(fn(*data))[0]) for impl, fn in fns.items()}
      times = {}
      for impl, fn in fns.items():
        err = max(rel_err(g, r) for g, r in zip(first[impl], first["xla"])) if "xla" in first else float("nan")
        seconds = time_executable(fn, data, args.repeats, warmup=1) / copies
        times[impl] = seconds
        moved = PASSES[mode] * n * length * c * dtype.itemsize
        rows.append({"tokens": n * length, "N": n, "L": length, "C": c, "K": k, "dtype": str(dtype), "mode": mode,
                     "impl": impl, "ms": seconds * 1e3, "tb_s": moved / seconds / 1e12,
                     "frac_copy": moved / seconds / 1e12 / args.copy_tbs, "rel_err": err, **prov})
      del first
      xla_copy_tbs = next((r["tb_s"] for r in rows if r["mode"] == "copy" and (r["tokens"], r["C"], r["K"], r["dtype"])
                       == (n * length, c, k, str(dtype))), float("nan"))
      for row in rows[-len(fns):]:
        row["speedup_vs_xla"] = times["xla"] / times[row["impl"]] if "xla" in times else float("nan")
        print(f"{row['tokens']:>6} C={c:<5} K={k} {mode:<8} {row['impl']:<12} {row['ms']:8.3f} ms "
              f"{row['tb_s']:5.2f} TB/s {row['frac_copy']:5.2f} of copy ({row['tb_s'] / xla_copy_tbs:4.2f} of XLA's) "
              f"x{row['speedup_vs_xla']:.2f} vs XLA  rel_err {row['rel_err']:.1e}", flush=True)
      write_rows(path, rows)
  if out_of_time():
    print(f"stopped after {time.perf_counter() - start:.0f} s: --resume goes on", flush=True)
  if not any(r["mode"] in MODES for r in rows):
    print("nothing measured yet", flush=True)
    return
  plot([r for r in rows if r["mode"] in MODES], os.path.join(args.out, "conv1d.png"), args.copy_tbs)
  print(f"wrote {path} and conv1d.png ({prov['gpu']}, driver {prov['driver']}, jax {prov['jax_version']}, "
        f"commit {prov['commit']})")


if __name__ == "__main__":
  main()
