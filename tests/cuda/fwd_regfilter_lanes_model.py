"""A model of the register-filter forward kernel's lane layout (csrc/fwd/regfilter.cuh)
for pixels whose 32-bit words are not a multiple of 32: the words (C / 2 channel words
in fp16/bf16, C channels in fp32) padded to whole warps, each lane copying one 16-byte
chunk of a window column per copy step into the warp's ring, and reading its own word
back. Checked for every word count that is a multiple of 4 up to 2048 (C a multiple of
8 up to 4096 in fp16/bf16, of 4 up to 2048 in fp32) and both window widths (3x3 at 8
outputs a thread: 10 columns; 5x5 at 4: 8):
- a copy the kernel issues (copy_ok) reads only words inside the pixel;
- a copy it switches off would have read only words past the pixel;
- every active lane finds, at its ring slot of each column, its own word, written by
  exactly one copy.
Runs on the CPU: python tests/cuda/fwd_regfilter_lanes_model.py
"""

import sys

THREADS = 128


def lane_words(words):
  """fwd_regfilter_lane_words, from the pixel's word count."""
  return (words + 31) // 32 * 32


def check(words, window):
  padded = lane_words(words)
  copies = (window + 3) // 4
  errors = []
  for warp_first in range(0, padded, 32):
    tid0 = warp_first % THREADS  # the warp's first thread index in its block
    ring = {}  # ring index -> (column, word of the pixel)
    for lane in range(32):
      tid, lane_word = tid0 + lane, warp_first + lane
      copy_col = lane // 8
      copy_src = copy_col * words + 4 * (lane % 8) - lane  # words from this lane's own word of column 0
      copy_dst = copy_col * THREADS + 4 * (lane % 8) - lane  # and from its own ring word
      copy_ok = lane_word - lane + 4 * (lane % 8) < words
      for i in range(copies):
        c = 4 * i + copy_col
        if c >= window:
          continue
        # Source offsets from the pixel row's column 0, word 0 (x_offset addresses lane_word).
        sources = [lane_word + copy_src + 4 * i * words + j for j in range(4)]
        inside = [src // words == c and src % words < words for src in sources]
        if copy_ok and not all(inside):
          errors.append(f"words={words}: lane {lane_word} copies outside column {c}: {sources}")
        if not copy_ok and any(src // words == c for src in sources):
          errors.append(f"words={words}: lane {lane_word} skips words of column {c}: {sources}")
        if copy_ok:
          for j, src in enumerate(sources):
            index = tid + copy_dst + 4 * i * THREADS + j
            if index in ring:
              errors.append(f"words={words}: ring word {index} written twice")
            ring[index] = (c, src % words)
    for lane in range(32):
      word = warp_first + lane
      if word >= words:
        continue
      for c in range(window):
        got = ring.get(tid0 + lane + c * THREADS)
        if got != (c, word):
          errors.append(f"words={words}: lane {word} reads {got} at column {c}, not (c, {word})")
  return errors


def main():
  errors = []
  for words in range(4, 2049, 4):
    for window in (10, 8):
      errors += check(words, window)
  for e in errors[:20]:
    print(e)
  print(f"{len(errors)} errors over 4..2048 words a pixel (multiples of 4), windows of 10 and 8 columns")
  return 1 if errors else 0


if __name__ == "__main__":
  sys.exit(main())
