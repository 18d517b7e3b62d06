"""Plots a benchmark CSV: TFLOP/s against filter size k for the paper's three
feature maps, jax_flashdwc against XLA, under the bandwidth and fp32-rate roofs.

  python benchmarks/visualize.py benchmarks/results/h200_fwd_fp32.csv --out plot.png
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_dwconv import H200_BANDWIDTH_GBS, H200_FP32_TFLOPS  # noqa: E402


PASS_NAMES = {"fwd": "forward", "bwd_data": "input gradient", "bwd_filter": "filter gradient"}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("csv")
  parser.add_argument("--out", required=True)
  args = parser.parse_args(argv)

  rows = [r for r in csv.DictReader(open(args.csv)) if r["case"].startswith("paper_")]
  by_map = defaultdict(list)
  for r in rows:
    by_map[(r["dtype"], f"{r['n']}x{r['h']}x{r['w']}x{r['c']}")].append(r)
  fig, axes = plt.subplots(1, len(by_map), figsize=(5 * len(by_map), 4.2), sharey=True, squeeze=False)
  for ax, ((dtype, fmap), rs) in zip(axes[0], sorted(by_map.items(), key=lambda kv: -int(kv[1][0]["h"]))):
    rs.sort(key=lambda r: int(r["kh"]))
    ks = [int(r["kh"]) for r in rs]
    ax.plot(ks, [float(r["flashdwc_tflops"]) for r in rs], "o-", label="jax_flashdwc")
    xla = [float(r["xla_tflops"]) for r in rs]
    if any(v == v for v in xla):  # a run with --skip-xla has only NaN here: no XLA line
      ax.plot(ks, xla, "s--", label="XLA (cuDNN)")
    # Bandwidth roof: FLOPs over (x read once + y written once) / bandwidth.
    roof = [float(r["flashdwc_tflops"]) * H200_BANDWIDTH_GBS / float(r["flashdwc_gbs"]) for r in rs]
    ax.plot(ks, roof, ":", color="gray", label=f"bandwidth roof ({H200_BANDWIDTH_GBS:.0f} GB/s)")
    ax.axhline(H200_FP32_TFLOPS, color="black", linestyle="-.", linewidth=1,
               label=f"fp32 rate ({H200_FP32_TFLOPS} TFLOP/s)")
    ax.set_yscale("log")
    ax.set_xticks(ks)
    ax.set_title(f"{dtype} {PASS_NAMES.get(rs[0]['mode'], rs[0]['mode'])}, NxHxWxC = {fmap}")
    ax.set_xlabel("filter size k (k x k)")
    ax.grid(True, which="both", alpha=0.3)
  axes[0][0].set_ylabel("TFLOP/s (2*N*Ho*Wo*C*k^2 / time)")
  axes[0][0].legend(fontsize=8, loc="lower right")
  first = rows[0]
  # A run resumed after a dispatch change holds points from two commits: name both.
  commits = ", ".join(dict.fromkeys(r["commit"] for r in rows))
  fig.suptitle(f"{first['gpu']}, driver {first['driver']}, jax {first['jax_version']}, "
               f"commit {commits}, {first['date']}", fontsize=9)
  fig.tight_layout()
  fig.savefig(args.out, dpi=110)
  print(f"wrote {args.out}")


if __name__ == "__main__":
  main()
