"""Plots a kernel-level A/B CSV (benchmarks/results/*_kernels_ab_*.csv): the
speedup of the after build over the before build at each point, one bar per
point, coloured by the CSV's first column (the kernel or tiling the after build
ran there).

  python benchmarks/plot_ab.py benchmarks/results/h200_fwd_kernels_ab_6559967.csv --out plot.png
"""

from __future__ import annotations

import argparse
import csv

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("csv")
  parser.add_argument("--out", required=True)
  args = parser.parse_args(argv)

  with open(args.csv) as f:
    reader = csv.DictReader(line for line in f if not line.startswith("#"))
    group_field = reader.fieldnames[0]
    rows = list(reader)
  labels = [f"{r['dtype']} {r['shape_nhwc']} k{r['k']}" + (f" s{r['stride']}" if r.get("stride", "1") != "1" else "")
            for r in rows]
  speedups = [float(r["speedup"]) for r in rows]
  groups = sorted({r[group_field] for r in rows})
  colors = {g: plt.cm.tab10(i) for i, g in enumerate(groups)}
  fig, ax = plt.subplots(figsize=(max(8, 0.32 * len(rows)), 4.8))
  ax.bar(range(len(rows)), speedups, color=[colors[r[group_field]] for r in rows])
  ax.axhline(1.0, color="black", linewidth=1)
  ax.set_xticks(range(len(rows)))
  ax.set_xticklabels(labels, rotation=90, fontsize=7)
  ax.set_ylabel("speedup, after over before (kernel level)")
  ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=colors[g]) for g in groups], labels=groups,
            title=group_field, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
  ax.grid(True, axis="y", alpha=0.3)
  first = rows[0]
  ax.set_title(f"{first['gpu']}, driver {first['driver']}, commit {first['commit']}, {first['date']}", fontsize=9)
  fig.tight_layout()
  fig.savefig(args.out, dpi=110)
  print(f"wrote {args.out}")


if __name__ == "__main__":
  main()
