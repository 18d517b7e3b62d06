"""Times one jitted training step (forward, backward, AdamW) of each model, with
jax_flashdwc's depthwise conv and with flax's own, on data already on the device.
Writes a CSV and a bar chart of the speedups.

  python examples/bench_train.py --bf16 --batch 64 --image-size 224 --out benchmarks/results
  python examples/bench_train.py --models convnext_micro --batch 8 --image-size 32   # CPU smoke run
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import DWCONVS, MODELS  # noqa: E402
from train import make_train_step  # noqa: E402

from jax_flashdwc import conv as conv_module  # noqa: E402

DEFAULT_MODELS = ("convnext_t", "convmixer_1536_20", "replknet31b", "slak_t")


def make_step(model_name, conv, batch, size, bf16, classes=1000, devices=None):
  """The jitted training step of a model and its arguments (params, opt_state, x, y),
  with random data already on the device.

  With `devices`, the step is data-parallel over them: the (global) batch is split
  over a 1-D mesh, parameters and optimizer state are replicated, and XLA
  all-reduces the gradients.
  """
  dtype = jnp.bfloat16 if bf16 else jnp.float32
  model = MODELS[model_name](DWCONVS[conv], classes, dtype)
  key = jax.random.key(0)
  x = jax.random.uniform(key, (batch, size, size, 3), jnp.float32, -1, 1)
  y = jax.random.randint(key, (batch,), 0, classes)
  params = model.init(key, x[:1])
  optimizer = optax.adamw(1e-3)
  opt_state = optimizer.init(params["params"])  # the BatchNorm models' batch_stats are not optimized
  if devices is not None:
    mesh = Mesh(np.array(devices), ("data",))
    x, y = jax.device_put((x, y), NamedSharding(mesh, P("data")))
    params, opt_state = jax.device_put((params, opt_state), NamedSharding(mesh, P()))
  return make_train_step(model, optimizer), (params, opt_state, x, y)


def run_steps(step, args, count):
  """Runs `count` steps from `args`, feeding each step's state to the next; returns
  the seconds each took (host clock, waiting for the loss) and the last arguments."""
  params, opt_state, x, y = args
  times = []
  for _ in range(count):
    start = time.perf_counter()
    params, opt_state, loss, _ = step(params, opt_state, x, y)
    jax.block_until_ready(loss)
    times.append(time.perf_counter() - start)
  return times, (params, opt_state, x, y)


def time_step(model_name, conv, batch, size, bf16, steps, classes=1000, devices=None):
  """Median seconds per training step, after two steps of compilation and warm-up."""
  step, args = make_step(model_name, conv, batch, size, bf16, classes, devices)
  _, args = run_steps(step, args, 2)
  times, _ = run_steps(step, args, steps)
  return statistics.median(times)


def write_csv(rows, path):
  """Rows (dicts with the same keys) as a CSV file, the keys as its header."""
  with open(path, "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)


def pyplot():
  """matplotlib.pyplot on the file-only backend (no display on a GPU machine)."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  return plt


def write_results(rows, stem, title):
  """The rows as stem.csv, and a bar chart of their speedups as stem.png."""
  write_csv(rows, stem + ".csv")
  plt = pyplot()
  fig, ax = plt.subplots(figsize=(6.5, 3.8))
  speedups = [float(r["speedup"]) for r in rows]
  ax.bar(range(len(rows)), speedups)
  ax.set_xticks(range(len(rows)), [r["model"] for r in rows], rotation=20, ha="right")
  for i, s in enumerate(speedups):
    ax.text(i, s, f"{s:.2f}x", ha="center", va="bottom")
  ax.axhline(1.0, color="gray", linewidth=1)
  ax.set_ylabel("training-step speedup over flax's conv")
  ax.set_title(title, fontsize=9)
  fig.tight_layout()
  fig.savefig(stem + ".png", dpi=110)
  plt.close(fig)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), choices=sorted(MODELS))
  parser.add_argument("--batch", type=int, default=64)
  parser.add_argument("--image-size", type=int, default=224)
  parser.add_argument("--bf16", action="store_true")
  parser.add_argument("--steps", type=int, default=20)
  parser.add_argument("--out", default=None)
  parser.add_argument("--tall-filters", choices=["transposed", "direct"], default="transposed",
                      help="direct: run tall fp16/bf16 filters (SLaK's 51x5) without exchanging H and W, "
                           "the A/B of jax_flashdwc.conv.TRANSPOSE_TALL_FILTERS")
  args = parser.parse_args(argv)
  conv_module.TRANSPOSE_TALL_FILTERS = args.tall_filters == "transposed"

  device = jax.devices()[0]
  rows = []
  stem = None
  if args.out:
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"train_step_{device.platform}_{'bfloat16' if args.bf16 else 'float32'}"
                        f"_b{args.batch}" + ("_tall_direct" if args.tall_filters == "direct" else ""))
  for name in args.models:
    t = {conv: time_step(name, conv, args.batch, args.image_size, args.bf16, args.steps) for conv in ("flax", "flashdwc")}
    rows.append({"model": name, "batch": args.batch, "image_size": args.image_size,
                 "dtype": "bfloat16" if args.bf16 else "float32", "flax_ms": f"{t['flax'] * 1e3:.3f}",
                 "flashdwc_ms": f"{t['flashdwc'] * 1e3:.3f}", "speedup": f"{t['flax'] / t['flashdwc']:.3f}",
                 "tall_filters": args.tall_filters,
                 "device": device.device_kind, "jax_version": jax.__version__,
                 "commit": os.environ.get("FLASHDWC_COMMIT", "unknown"),
                 "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")})
    print(f"{name:20s} flax {t['flax'] * 1e3:9.2f} ms   flashdwc {t['flashdwc'] * 1e3:9.2f} ms   "
          f"x{t['flax'] / t['flashdwc']:.2f}", flush=True)
    if stem:  # after every model, so that a run cut short keeps what it measured
      write_results(rows, stem, f"{device.device_kind}, {rows[0]['dtype']}, batch {args.batch}, "
                    f"{args.image_size}x{args.image_size}")
  if stem:
    print(f"wrote {stem}.csv and {stem}.png")
  return rows


if __name__ == "__main__":
  main()
