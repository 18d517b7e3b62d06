"""Scaling over 1, 2, 4 and 8 local devices, in two parts.

data: the data-parallel training step (forward, backward, AdamW) of RepLKNet-31B and
  ConvNeXt-T with jax_flashdwc's depthwise conv and with flax's nn.Conv, weak
  scaling (the same batch on every device); examples/bench_data_parallel.py does the
  measuring and writes data_parallel_*.{csv,png}.

spatial: one large-kernel layer on one high-resolution image, its height sharded
  over n devices (strong scaling: the same problem on more devices): the forward
  and both gradients of sum(conv(x, w) * ct), default 1 x 2048 x 2048 x 128, k = 31,
  with jax_flashdwc (halo exchange, jax_flashdwc/_partitioning.py) and with XLA's
  conv (XLA's own spatial partitioning). Efficiency at n is t(1) / (n * t(n)). From
  each compiled program it also records the bytes its collective-permutes move per
  device, the halo bytes the geometry implies (K - 1 rows of the block's width for
  the forward's and the filter gradient's extension, as many back for the input
  gradient), and how many all-gathers it holds. Writes spatial_*.{csv,png}.

  python benchmarks/bench_scaling.py --bf16 --out benchmarks/results
  python benchmarks/bench_scaling.py --parts spatial --size 4096 --bf16 --out build/scaling
  XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu python benchmarks/bench_scaling.py \\
    --parts spatial --size 64 --channels 8 --kernel 7 --steps 2 --out build/scaling   # a CPU smoke run
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import bench_data_parallel  # noqa: E402
from bench_train import pyplot, write_csv  # noqa: E402

from jax_flashdwc import depthwise_conv2d  # noqa: E402

_COLLECTIVE = re.compile(
    r"=\s+(\([^=]*?\)|\S+)\s+(all-gather|all-reduce|all-to-all|reduce-scatter|collective-permute)(-start)?\(")
_ARRAY = re.compile(r"\b(f32|bf16|f16|s32|u32|pred)\[([\d,]*)\]")
_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "pred": 1}


def collective_bytes(hlo):
  """{op: bytes per device} over the collectives of a compiled module (an async start
  counts its operand), and the number of all-gathers."""
  moved, gathers = {}, 0
  for shapes, op, start in _COLLECTIVE.findall(hlo):
    arrays = _ARRAY.findall(shapes)
    arrays = arrays[:1] if start else arrays
    moved[op] = moved.get(op, 0) + sum(_BYTES[t] * int(np.prod([int(d) for d in dims.split(",") if d]))
                                       for t, dims in arrays)
    gathers += op == "all-gather"
  return moved, gathers


def spatial_step(conv, kernel):
  """jit of (x, w, ct) -> (loss, (dx, dw)) of loss = sum(conv(x, w) * ct): the forward
  (which the value needs; the gradients alone do not), the input and the filter gradient."""
  implementation = "flashdwc" if conv == "flashdwc" else "xla"

  def loss(x, w, ct):
    y = depthwise_conv2d(x, w, padding="SAME", implementation=implementation)
    return jnp.sum(y.astype(jnp.float32) * ct.astype(jnp.float32))

  return jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))


def time_spatial(conv, devices, batch, size, channels, kernel, dtype, steps):
  """(median ms per call, collective bytes per device, all-gather count) of the sharded step."""
  mesh = Mesh(np.array(devices), ("rows",))
  image = NamedSharding(mesh, P(None, "rows"))
  key_x, key_w, key_ct = jax.random.split(jax.random.key(0), 3)
  shape = (batch, size, size, channels)
  make = jax.jit(lambda k: jax.random.normal(k, shape, jnp.float32).astype(dtype), out_shardings=image)
  x, ct = make(key_x), make(key_ct)
  w = jax.device_put(jax.random.normal(key_w, (kernel, kernel, 1, channels), jnp.float32).astype(dtype) / kernel,
                     NamedSharding(mesh, P()))
  step = spatial_step(conv, kernel)
  moved, gathers = collective_bytes(step.lower(x, w, ct).compile().as_text())
  jax.block_until_ready(step(x, w, ct))
  times = []
  for _ in range(steps):
    start = time.perf_counter()
    jax.block_until_ready(step(x, w, ct))
    times.append(time.perf_counter() - start)
  return statistics.median(times) * 1e3, moved, gathers


def halo_bytes(n, batch, size, channels, kernel, itemsize):
  """Bytes per device the halo exchange of one SAME stride-1 layer moves on n shards of H:
  (K - 1) rows of width `size` out in the forward's extension of x, again in the filter
  gradient's, and back in the input gradient's fold."""
  return 0 if n == 1 else 3 * batch * (kernel - 1) * size * channels * itemsize


def write_spatial(rows, stem, title):
  write_csv(rows, stem + ".csv")
  plt = pyplot()
  fig, (ax_ms, ax_eff) = plt.subplots(1, 2, figsize=(10, 3.8))
  for conv in sorted({r["conv"] for r in rows}):
    points = sorted((int(r["devices"]), r) for r in rows if r["conv"] == conv)
    counts = [n for n, _ in points]
    style = "-o" if conv == "flashdwc" else "--s"
    ax_ms.plot(counts, [float(r["ms"]) for _, r in points], style, label=conv)
    ax_eff.plot(counts, [100 * float(r["efficiency"]) for _, r in points], style, label=conv)
  counts = sorted({int(r["devices"]) for r in rows})
  for ax in (ax_ms, ax_eff):
    ax.set_xticks(counts)
    ax.set_xlabel("devices (H sharded)")
    ax.legend(fontsize=8)
  ax_ms.set_ylabel("forward + both gradients (ms)")
  ax_ms.set_yscale("log")
  ax_eff.axhline(85, color="gray", linewidth=1, linestyle=":")
  ax_eff.set_ylabel("strong scaling efficiency (%)")
  ax_eff.set_ylim(0, 110)
  fig.suptitle(title, fontsize=9)
  fig.tight_layout()
  fig.savefig(stem + ".png", dpi=110)
  plt.close(fig)


def run_spatial(args, local, counts):
  dtype = jnp.bfloat16 if args.bf16 else jnp.float32
  dtype_name = jnp.dtype(dtype).name
  stem = None
  if args.out:
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"spatial_{local[0].platform}_{dtype_name}_{args.batch}x{args.size}x{args.size}"
                                  f"x{args.channels}_k{args.kernel}")
  title = (f"{local[0].device_kind}, {dtype_name}, {args.batch}x{args.size}x{args.size}x{args.channels}, "
           f"k={args.kernel}, H sharded, strong scaling")
  rows = []
  for conv in args.convs:
    base = None
    for n in counts:
      ms, moved, gathers = time_spatial(conv, local[:n], args.batch, args.size, args.channels, args.kernel, dtype,
                                        args.steps)
      base = ms if n == 1 else base
      expected = halo_bytes(n, args.batch, args.size, args.channels, args.kernel, jnp.dtype(dtype).itemsize)
      rows.append({"conv": conv, "devices": n, "batch": args.batch, "size": args.size, "channels": args.channels,
                   "kernel": args.kernel, "dtype": dtype_name, "ms": f"{ms:.3f}",
                   "efficiency": f"{base / (n * ms):.4f}",
                   "permute_bytes": moved.get("collective-permute", 0), "halo_bytes": expected,
                   "all_reduce_bytes": moved.get("all-reduce", 0), "all_gathers": gathers, "steps": args.steps,
                   "device": local[0].device_kind, "jax_version": jax.__version__,
                   "commit": os.environ.get("FLASHDWC_COMMIT", "unknown"),
                   "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")})
      print(f"spatial {conv:9s} {n} device(s) {ms:10.3f} ms  efficiency {100 * base / (n * ms):5.1f}%  "
            f"permuted {moved.get('collective-permute', 0)} B (halos {expected} B)  all-gathers {gathers}",
            flush=True)
      if stem:
        write_spatial(rows, stem, title)
  if stem and rows:
    print(f"wrote {stem}.csv and {stem}.png")
  return rows


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--parts", nargs="+", default=["data", "spatial"], choices=["data", "spatial"])
  parser.add_argument("--devices", nargs="+", type=int, default=[1, 2, 4, 8],
                      help="device counts; counts above the local device count are left out")
  parser.add_argument("--bf16", action="store_true")
  parser.add_argument("--steps", type=int, default=10)
  parser.add_argument("--out", default=None)
  parser.add_argument("--convs", nargs="+", default=["flashdwc", "xla"], choices=["flashdwc", "xla"],
                      help="spatial part: jax_flashdwc or XLA's conv")
  parser.add_argument("--batch", type=int, default=1, help="spatial part")
  parser.add_argument("--size", type=int, default=2048, help="spatial part: H = W")
  parser.add_argument("--channels", type=int, default=128, help="spatial part")
  parser.add_argument("--kernel", type=int, default=31, help="spatial part")
  parser.add_argument("--models", nargs="+", default=["replknet31b", "convnext_t"], help="data part")
  parser.add_argument("--per-device-batch", type=int, default=64, help="data part")
  parser.add_argument("--image-size", type=int, default=224, help="data part")
  args = parser.parse_args(argv)

  local = jax.devices()
  counts = [n for n in sorted(set(args.devices)) if n <= len(local)]
  if 1 not in counts:
    raise ValueError(f"--devices {args.devices} must include 1: efficiency is measured against one device")
  if "data" in args.parts:
    data_args = ["--models", *args.models, "--devices", *map(str, counts), "--per-device-batch",
                 str(args.per_device_batch), "--image-size", str(args.image_size), "--steps", str(args.steps)]
    data_args += ["--bf16"] if args.bf16 else []
    data_args += ["--out", args.out] if args.out else []
    bench_data_parallel.main(data_args)
  if "spatial" in args.parts:
    run_spatial(args, local, counts)


if __name__ == "__main__":
  main()
