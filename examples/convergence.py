"""Convergence check: the same model trained with jax_flashdwc and with flax's
own depthwise conv, from the same initialization on the same batches, must
follow the same loss curve.

Writes a CSV and a plot of both curves, and prints the final losses (each the
mean of the last 50 steps, which evens out batch-to-batch noise) and their
relative difference; exits 1 if that exceeds --tolerance.

  python examples/convergence.py --steps 300 --out benchmarks/results
"""

from __future__ import annotations

import argparse
import csv
import os
import sys

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train import train  # noqa: E402


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--model", default="convnext_micro")
  parser.add_argument("--steps", type=int, default=300)
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--image-size", type=int, default=32)
  parser.add_argument("--bf16", action="store_true")
  parser.add_argument("--tolerance", type=float, default=0.02)
  parser.add_argument("--out", default=None, help="folder for the CSV and PNG")
  args = parser.parse_args(argv)

  curves = {}
  for conv in ("flashdwc", "flax"):
    print(f"training {args.model} with {conv} ...", flush=True)
    curves[conv] = train(args.model, conv, args.steps, args.batch, args.image_size, bf16=args.bf16, quiet=True)
  window = min(50, args.steps)
  final = {conv: float(np.mean(losses[-window:])) for conv, losses in curves.items()}
  rel = abs(final["flashdwc"] - final["flax"]) / final["flax"]
  device = jax.devices()[0]
  print(f"{args.model}, {args.steps} steps, {'bf16' if args.bf16 else 'fp32'}, {device.device_kind}: final loss "
        f"(mean of last {window}) flashdwc {final['flashdwc']:.4f}, flax {final['flax']:.4f}, "
        f"relative difference {100 * rel:.2f}% (tolerance {100 * args.tolerance:.0f}%)")

  if args.out:
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"convergence_{args.model}_{device.platform}")
    with open(stem + ".csv", "w", newline="") as f:
      writer = csv.writer(f)
      writer.writerow(["step", "loss_flashdwc", "loss_flax", "device", "jax_version"])
      for step, (a, b) in enumerate(zip(curves["flashdwc"], curves["flax"])):
        writer.writerow([step, f"{a:.6f}", f"{b:.6f}", device.device_kind, jax.__version__])
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for conv, style in (("flax", "-"), ("flashdwc", "--")):
      ax.plot(curves[conv], style, label=f"{conv} (final {final[conv]:.4f})", linewidth=1.2)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title(f"{args.model}: jax_flashdwc vs flax depthwise conv ({device.device_kind})", fontsize=9)
    ax.legend()
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(stem + ".png", dpi=110)
    print(f"wrote {stem}.csv and {stem}.png")
  return 0 if rel <= args.tolerance else 1


if __name__ == "__main__":
  sys.exit(main())
