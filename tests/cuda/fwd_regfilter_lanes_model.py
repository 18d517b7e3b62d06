"""A model of the register-filter forward kernel's lane layout (csrc/fwd/regfilter.cuh)
for C not a multiple of 64: a pixel's C / 2 channel pairs padded to whole warps, each
lane copying one 16-byte chunk of a window column per copy step into the warp's ring,
and reading its own word back. Checked for every C that is a multiple of 8 up to 2048
and both window widths (3x3 at 8 outputs a thread: 10 columns; 5x5 at 4: 8):
- a copy the kernel issues (copy_ok) reads only words inside the pixel;
- a copy it switches off would have read only words past the pixel;
- every active lane finds, at its ring slot of each column, the word of its own pair,
  written by exactly one copy.
Runs on the CPU: python tests/cuda/fwd_regfilter_lanes_model.py
"""

import sys

THREADS = 128


def lane_pairs(channels):
  """fwd_regfilter_lane_pairs."""
  return (channels // 2 + 31) // 32 * 32


def check(channels, window):
  pairs, padded = channels // 2, lane_pairs(channels)
  copies = (window + 3) // 4
  errors = []
  for warp_first in range(0, padded, 32):
    tid0 = warp_first % THREADS  # the warp's first thread index in its block
    ring = {}  # ring index -> (column, word of the pixel)
    for lane in range(32):
      tid, lane_pair = tid0 + lane, warp_first + lane
      copy_col = lane // 8
      copy_src = copy_col * pairs + 4 * (lane % 8) - lane  # words from this lane's own word of column 0
      copy_dst = copy_col * THREADS + 4 * (lane % 8) - lane  # and from its own ring word
      copy_ok = lane_pair - lane + 4 * (lane % 8) < pairs
      for i in range(copies):
        c = 4 * i + copy_col
        if c >= window:
          continue
        # Source offsets from the pixel row's column 0, word 0 (x_offset addresses lane_pair).
        sources = [lane_pair + copy_src + 4 * i * pairs + j for j in range(4)]
        inside = [src // pairs == c and src % pairs < pairs for src in sources]
        if copy_ok and not all(inside):
          errors.append(f"C={channels}: lane {lane_pair} copies outside column {c}: {sources}")
        if not copy_ok and any(src // pairs == c for src in sources):
          errors.append(f"C={channels}: lane {lane_pair} skips words of column {c}: {sources}")
        if copy_ok:
          for j, src in enumerate(sources):
            index = tid + copy_dst + 4 * i * THREADS + j
            if index in ring:
              errors.append(f"C={channels}: ring word {index} written twice")
            ring[index] = (c, src % pairs)
    for lane in range(32):
      pair = warp_first + lane
      if pair >= pairs:
        continue
      for c in range(window):
        got = ring.get(tid0 + lane + c * THREADS)
        if got != (c, pair):
          errors.append(f"C={channels}: lane {pair} reads {got} at column {c}, not (c, {pair})")
  return errors


def main():
  errors = []
  for channels in range(8, 2049, 8):
    for window in (10, 8):
      errors += check(channels, window)
  for e in errors[:20]:
    print(e)
  print(f"{len(errors)} errors over C = 8..2048 (multiples of 8), windows of 10 and 8 columns")
  return 1 if errors else 0


if __name__ == "__main__":
  sys.exit(main())
