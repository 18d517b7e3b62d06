"""Plots a fusion benchmark CSV (bench_dwconv.py --mode fwd_bias_gelu
fwd_bias_gelu_unfused fwd_bn_relu fwd_bn_relu_unfused): for each fusion, dtype and
paper map, the fused forward's time over the unfused sequence's (our conv, then or
after XLA's elementwise pass) against the filter size k. Below 1: the fusion saves time.

  python benchmarks/plot_fusion.py benchmarks/results/h200_fusion_fwd_47957c7.csv --out plot.png
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FUSIONS = {"fwd_bias_gelu": "bias + GELU epilogue", "fwd_bn_relu": "scale, shift + ReLU prologue"}


def fused_over_unfused(rows):
  """{(fusion, dtype, map): [(k, fused ms / unfused ms)]} for the points timed both ways."""
  times = {(r["mode"], r["dtype"], r["case"]): float(r["flashdwc_ms"]) for r in rows}
  series = defaultdict(list)
  for r in rows:
    if r["mode"] not in FUSIONS or not r["case"].startswith("paper_"):
      continue
    unfused = times.get((r["mode"] + "_unfused", r["dtype"], r["case"]))
    if unfused is None:
      continue
    fmap = f"{r['n']}x{r['h']}x{r['w']}x{r['c']}"
    series[(r["mode"], r["dtype"], fmap)].append((int(r["kh"]), float(r["flashdwc_ms"]) / unfused))
  return {key: sorted(points) for key, points in series.items()}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("csv")
  parser.add_argument("--out", required=True)
  args = parser.parse_args(argv)

  rows = list(csv.DictReader(open(args.csv)))
  series = fused_over_unfused(rows)
  panels = sorted({(mode, dtype) for mode, dtype, _ in series})
  fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.8), sharey=True, squeeze=False)
  for ax, (mode, dtype) in zip(axes[0], panels):
    for (m, d, fmap), points in sorted(series.items()):
      if (m, d) == (mode, dtype):
        ax.plot([k for k, _ in points], [v for _, v in points], marker="o", label=fmap)
    ax.axhline(1.0, color="gray", linewidth=1)
    ax.set_xticks(sorted({k for (m, d, _), points in series.items() if (m, d) == (mode, dtype) for k, _ in points}))
    ax.set_xlabel("filter size k")
    ax.set_title(f"{FUSIONS[mode]}, {dtype}", fontsize=9)
    ax.legend(fontsize=7)
  axes[0][0].set_ylabel("fused time / unfused time")
  commits = ", ".join(sorted({r["commit"] for r in rows}))
  gpu = rows[0]["gpu"] if rows else ""
  fig.suptitle(f"Fused forward against the unfused sequence, {gpu} (commits {commits})", fontsize=9)
  fig.tight_layout()
  fig.savefig(args.out, dpi=110)
  print(f"wrote {args.out}")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
