"""Where a kernel's instructions and stalls go, by basic block, from Nsight Compute's
per-SASS-instruction page.

Make the input on the GPU machine (SourceCounters is the section that counts per
instruction), for example for the tensor-core forward harness:

  ncu --clock-control none --kernel-name regex:fwd_mma --launch-skip 2 --launch-count 1 \\
      --section SourceCounters -o rep build/gpu-bin/time_fwd_a profile bf16 128 128 128 128 9 1
  ncu --import rep.ncu-rep --page source --print-source sass --csv | xz > sass.csv.xz

then `python3 benchmarks/cuda/sass_blocks.py sass.csv.xz [ROWS]`. A block here is a run
of consecutive instructions executed the same number of times; each row gives its
first instruction's index, length, executions, share of all executed instructions and
of all stall samples, and its most frequent opcodes.
"""

import collections
import csv
import lzma
import sys


def blocks_of(rows):
  header, data = rows[1], rows[2:]
  source = header.index("Source")
  executed = header.index("Instructions Executed")
  stalls = header.index("Warp Stall Sampling (All Samples)")
  blocks = []
  for index, row in enumerate(data):
    count = int(row[executed] or 0)
    words = row[source].split()
    opcode = (words[1] if words and words[0].startswith("@") and len(words) > 1 else words[0]) if words else ""
    if not blocks or blocks[-1]["executed"] != count:
      blocks.append({"start": index, "executed": count, "length": 0, "stalls": 0, "ops": collections.Counter()})
    block = blocks[-1]
    block["length"] += 1
    block["stalls"] += int(row[stalls] or 0)
    block["ops"][opcode.split(".")[0]] += 1
  return blocks


def main():
  path = sys.argv[1]
  limit = int(sys.argv[2]) if len(sys.argv) > 2 else 25
  opener = lzma.open if path.endswith(".xz") else open
  with opener(path, "rt") as f:
    blocks = blocks_of(list(csv.reader(f)))
  total = sum(b["executed"] * b["length"] for b in blocks)
  total_stalls = sum(b["stalls"] for b in blocks) or 1
  print(f"executed instructions {total:,}, stall samples {total_stalls:,}")
  for b in sorted(blocks, key=lambda b: -b["executed"] * b["length"])[:limit]:
    ops = " ".join(f"{k}:{v}" for k, v in b["ops"].most_common(8))
    print(f"@{b['start']:5d} n={b['length']:4d} executed={b['executed']:>10,} "
          f"instructions={b['executed'] * b['length'] / total:6.1%} stalls={b['stalls'] / total_stalls:6.1%}  {ops}")


if __name__ == "__main__":
  main()
