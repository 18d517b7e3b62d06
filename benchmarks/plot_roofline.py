"""Roofline of bench_dwconv.py CSVs: achieved TFLOP/s against arithmetic intensity
(useful FLOPs per byte that must move), one filled marker per flashdwc point and
a hollow one for XLA at the same point, under the machine's roofs.

The roofs are the figures measured on the project's H200 (docs/performance.md):
4.18 TB/s device-to-device copy, ~780 TFLOP/s bf16 dense matmul through wgmma,
~644 through mma.sync, 51.5 TFLOP/s fp32 matmul on the CUDA cores. Pass other
figures for another GPU (0 leaves a roof out). --series COMMIT=NAME draws the rows
of each named commit with their own marker (builds of different kernels timed in one
run: the Hopper forward's CSV). A depthwise conv on tensor cores also multiplies the
zeros of its banded operand, so its useful TFLOP/s sits below the tensor-core roof
by that waste factor even where the tensor cores are saturated.

  python benchmarks/plot_roofline.py benchmarks/results/h200_fwd_bf16_5017c22.csv \\
      benchmarks/results/h200_fwd_fp16_5017c22.csv --out roofline.png
  python benchmarks/plot_roofline.py benchmarks/results/h100_hopper_fwd_against_mma_sync.csv \\
      --copy-tbs 2.82 --fp32-tflops 0 \\
      --series f613ac7=wgmma 225f6c1=wgmma 0989cc7=mma.sync --out h100_hopper_roofline.png
"""

from __future__ import annotations

import argparse
import csv
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MARKERS = {"bfloat16": "o", "float16": "s", "float32": "^"}
SERIES_MARKERS = ("o", "D", "^", "s", "P")


def read_points(paths):
  """Rows of bench_dwconv.py CSVs that passed the correctness gate, with their
  arithmetic intensity (FLOP per byte) derived from the CSV's own columns."""
  points = []
  for path in paths:
    with open(path) as f:
      for row in csv.DictReader(line for line in f if not line.startswith("#")):
        if row.get("gate") != "ok":
          continue
        tflops, gbs = float(row["flashdwc_tflops"]), float(row["flashdwc_gbs"])
        if not (tflops > 0 and gbs > 0):
          continue
        xla = float(row["xla_tflops"]) if row.get("xla_tflops") else math.nan
        points.append({**row, "intensity": tflops * 1e3 / gbs, "ours": tflops, "xla": xla})
  return points


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("csv", nargs="+")
  parser.add_argument("--out", required=True)
  parser.add_argument("--copy-tbs", type=float, default=4.18, help="memory roof, TB/s")
  parser.add_argument("--wgmma-tflops", type=float, default=780.0, help="half-precision wgmma roof")
  parser.add_argument("--mma-sync-tflops", type=float, default=644.0, help="half-precision mma.sync roof")
  parser.add_argument("--fp32-tflops", type=float, default=51.5, help="fp32 CUDA-core roof")
  parser.add_argument("--series", nargs="+", default=[], metavar="COMMIT=NAME",
                      help="one marker per NAME for the rows of its commits, instead of one per dtype")
  args = parser.parse_args(argv)
  try:
    series = dict(item.split("=", 1) for item in args.series)
  except ValueError:
    raise SystemExit(f"--series takes COMMIT=NAME items; got {args.series}") from None
  names = list(dict.fromkeys(series.values()))
  series_marker = {name: SERIES_MARKERS[i % len(SERIES_MARKERS)] for i, name in enumerate(names)}

  points = read_points(args.csv)
  if not points:
    raise SystemExit(f"no gated rows with timings in {args.csv}")
  unnamed = sorted({p["commit"] for p in points} - set(series)) if series else []
  if unnamed:
    raise SystemExit(f"--series names no series for the rows of commits {unnamed}")
  intensities = [p["intensity"] for p in points]
  lo, hi = min(intensities) / 2, max(intensities) * 4
  xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]

  fig, ax = plt.subplots(figsize=(8.5, 5.6))
  roofs = [("wgmma", args.wgmma_tflops, "tab:red"), ("mma.sync", args.mma_sync_tflops, "tab:orange"),
           ("fp32 CUDA cores", args.fp32_tflops, "tab:gray")]
  for name, peak, color in roofs:
    if peak <= 0:
      continue
    ax.plot(xs, [min(peak, args.copy_tbs * x) for x in xs], color=color, linewidth=1.2,
            label=f"{name} {peak:g} TFLOP/s, copy {args.copy_tbs:g} TB/s")

  kernel_sizes = sorted({int(p["kh"]) for p in points})
  cmap = plt.get_cmap("viridis")
  color_of = {k: cmap(i / max(1, len(kernel_sizes) - 1)) for i, k in enumerate(kernel_sizes)}
  for p in points:
    color = color_of[int(p["kh"])]
    marker = series_marker[series[p["commit"]]] if series else MARKERS.get(p["dtype"], "D")
    ax.scatter(p["intensity"], p["ours"], color=color, marker=marker, s=28, zorder=3)
    if p["xla"] > 0:
      ax.scatter(p["intensity"], p["xla"], facecolors="none", edgecolors=color, marker=marker, s=28, zorder=3)

  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_xlabel("arithmetic intensity, useful FLOP per byte that must move")
  ax.set_ylabel("TFLOP/s (useful)")
  handles, labels = ax.get_legend_handles_labels()
  for k in kernel_sizes:
    handles.append(plt.Line2D([], [], color=color_of[k], marker="o", linestyle=""))
    labels.append(f"k = {k}")
  legend_markers = series_marker if series else {d: MARKERS.get(d, "D") for d in sorted({p["dtype"] for p in points})}
  for name, marker in legend_markers.items():
    handles.append(plt.Line2D([], [], color="black", marker=marker, linestyle=""))
    labels.append(name)
  handles.append(plt.Line2D([], [], markerfacecolor="none", markeredgecolor="black", marker="o", linestyle=""))
  labels.append("XLA (hollow)")
  ax.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
  ax.grid(True, which="both", alpha=0.25)
  first = points[0]
  modes = ", ".join(sorted({p["mode"] for p in points}))
  commits = ", ".join(dict.fromkeys(p["commit"] for p in points))  # CSVs of several runs: name each
  ax.set_title(f"{modes}\n{first['gpu']}, driver {first['driver']}, jax {first['jax_version']}, "
               f"commits {commits}", fontsize=9)
  fig.tight_layout()
  fig.savefig(args.out, dpi=110)
  print(f"wrote {args.out} ({len(points)} points)")


if __name__ == "__main__":
  main()
