"""Data-parallel scaling of one training step (forward, backward, AdamW) over 1, 2,
4 and 8 local devices, with jax_flashdwc's depthwise conv and with flax's own.

Weak scaling: every device keeps the same batch (`--per-device-batch`), so n
devices step a global batch n times larger. The scaling efficiency at n devices is
throughput(n) / (n * throughput(1)), images per second of the same model and conv.
Writes a CSV and a plot, after every measurement; a rerun with the same --out
skips what the CSV already holds, so a run cut short can be resumed.

  python examples/bench_data_parallel.py --bf16 --out benchmarks/results
  XLA_FLAGS=--xla_force_host_platform_device_count=4 JAX_PLATFORMS=cpu \\
    python examples/bench_data_parallel.py --models convnext_micro --per-device-batch 2 --image-size 32 --steps 2
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import sys

import jax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_train import pyplot, time_step, write_csv  # noqa: E402
from models import DWCONVS, MODELS  # noqa: E402

KEY = ("model", "conv", "devices")


def read_rows(path):
  if not os.path.exists(path):
    return []
  with open(path, newline="") as f:
    return list(csv.DictReader(f))


def write_rows(rows, stem, title):
  """The rows as stem.csv, and scaling efficiency against device count as stem.png."""
  write_csv(rows, stem + ".csv")
  plt = pyplot()
  fig, (ax_eff, ax_rate) = plt.subplots(1, 2, figsize=(10, 3.8))
  series = sorted({(r["model"], r["conv"]) for r in rows})
  for model, conv in series:
    points = sorted((int(r["devices"]), r) for r in rows if (r["model"], r["conv"]) == (model, conv))
    counts = [n for n, _ in points]
    style = "-o" if conv == "flashdwc" else "--s"
    ax_eff.plot(counts, [100 * float(r["efficiency"]) for _, r in points], style, label=f"{model}, {conv}")
    ax_rate.plot(counts, [float(r["images_per_s"]) for _, r in points], style, label=f"{model}, {conv}")
  counts = sorted({int(r["devices"]) for r in rows})
  for ax in (ax_eff, ax_rate):
    ax.set_xticks(counts)
    ax.set_xlabel("devices")
  ax_eff.axhline(90, color="gray", linewidth=1, linestyle=":")
  ax_eff.set_ylabel("scaling efficiency (%)")
  ax_eff.set_ylim(0, 110)
  ax_rate.set_ylabel("training images / s")
  ax_rate.set_yscale("log")
  ax_rate.legend(fontsize=8)
  fig.suptitle(title, fontsize=9)
  fig.tight_layout()
  fig.savefig(stem + ".png", dpi=110)
  plt.close(fig)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--models", nargs="+", default=["convnext_t", "replknet31b"], choices=sorted(MODELS))
  parser.add_argument("--convs", nargs="+", default=list(DWCONVS), choices=sorted(DWCONVS))
  parser.add_argument("--devices", nargs="+", type=int, default=[1, 2, 4, 8],
                      help="device counts to measure; counts above the local device count are left out")
  parser.add_argument("--per-device-batch", type=int, default=64)
  parser.add_argument("--image-size", type=int, default=224)
  parser.add_argument("--bf16", action="store_true")
  parser.add_argument("--steps", type=int, default=10)
  parser.add_argument("--out", default=None)
  args = parser.parse_args(argv)

  local = jax.devices()
  counts = [n for n in sorted(set(args.devices)) if n <= len(local)]
  if 1 not in counts:
    raise ValueError(f"--devices {args.devices} must include 1: efficiency is measured against one device")
  dtype = "bfloat16" if args.bf16 else "float32"
  stem = None
  rows = []
  if args.out:
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"data_parallel_{local[0].platform}_{dtype}_b{args.per_device_batch}")
    rows = read_rows(stem + ".csv")
  done = {tuple(r[k] for k in KEY) for r in rows}
  title = (f"{local[0].device_kind}, {dtype}, {args.per_device_batch} images per device, "
           f"{args.image_size}x{args.image_size}, weak scaling")
  for model in args.models:
    for conv in args.convs:
      base = next((float(r["images_per_s"]) for r in rows
                   if (r["model"], r["conv"], r["devices"]) == (model, conv, "1")), None)
      for n in counts:
        if (model, conv, str(n)) in done:
          continue
        batch = args.per_device_batch * n
        seconds = time_step(model, conv, batch, args.image_size, args.bf16, args.steps, devices=local[:n])
        rate = batch / seconds
        base = rate if n == 1 else base
        rows.append({"model": model, "conv": conv, "devices": n, "per_device_batch": args.per_device_batch,
                     "global_batch": batch, "image_size": args.image_size, "dtype": dtype,
                     "step_ms": f"{seconds * 1e3:.3f}", "images_per_s": f"{rate:.1f}",
                     "efficiency": f"{rate / (n * base):.4f}", "steps": args.steps,
                     "device": local[0].device_kind, "jax_version": jax.__version__,
                     "commit": os.environ.get("FLASHDWC_COMMIT", "unknown"),
                     "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")})
        print(f"{model:14s} {conv:9s} {n} device(s)  {seconds * 1e3:9.2f} ms/step  {rate:9.1f} img/s  "
              f"efficiency {100 * rate / (n * base):5.1f}%", flush=True)
        if stem:
          write_rows(rows, stem, title)
  if stem and rows:
    print(f"wrote {stem}.csv and {stem}.png")
  return rows


if __name__ == "__main__":
  main()
