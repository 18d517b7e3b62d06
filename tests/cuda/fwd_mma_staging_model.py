"""A model of the tensor-core forward's x staging indices (stage_input in
csrc/fwd/mma.cuh): each thread's items as the loop enumerates them (a row
phase and word lane per thread, rows outer, words Q apart inner, with the word,
image, source offset and ring slot stepped by constants) against the per-item
formulas (in-image flags, the global offsets read, the shared-memory word written),
for random geometries, narrow strips and negative or large padding included; and
that the threads together write every (octet, row, word) of the staged rows once.

  python tests/cuda/fwd_mma_staging_model.py
"""

import random

THREADS, OCTETS = 256, 2
LANES = THREADS // OCTETS


def ceil_div(a, b):
  return -(-a // b)


def make_grid(kernel_w, split):
  """The x tile row of make_mma_fwd_grid (fwd/mma_layout.h)."""
  frags = max(1, ceil_div(kernel_w - 1, 8))
  sub_cols = 8 * frags + 128 // split
  return dict(tile_cols=split * sub_cols, sub_pairs=sub_cols // 2)


def reference(p, g, t, row_begin, tile_rows, octet, row, q, narrow):
  """The item (octet, staged row, word q) from its definition."""
  pairs = g["tile_cols"] // 2
  sub, j = (q // g["sub_pairs"], q % g["sub_pairs"]) if narrow else (0, q)
  n, ih = t["n"] + sub, t["oh0"] - p["pad_top"] + row_begin + row
  iw, c = t["col0"] - p["pad_left"] + 2 * j, t["channel_base"] + 8 * octet
  slot = (row_begin + row) % tile_rows
  row_ok = n < p["batch"] and 0 <= ih < p["in_h"] and c < p["channels"]
  ok0, ok1 = row_ok and 0 <= iw < p["in_w"], row_ok and 0 <= iw + 1 < p["in_w"]
  offset = ((n * p["in_h"] + ih) * p["in_w"] + iw) * p["channels"] + c
  return (ok0, ok1, offset if ok0 else None, offset + p["channels"] if ok1 else None, slot * pairs + q)


def staging_cols(rows, sub_pairs):
  """stage_input's Q: ceil(rows / 16) rows a phase, at most sub_pairs words."""
  rows_each = ceil_div(max(rows, 1), 16)
  return min(LANES // ceil_div(max(rows, 1), rows_each), sub_pairs)


def stepped(p, g, t, row_begin, row_end, tile_rows, tid, narrow):
  """The thread's items as stage_input's loops find them: ((octet, row, q), item)."""
  pairs, sub_pairs = g["tile_cols"] // 2, g["sub_pairs"]
  rows = row_end - row_begin
  octet = tid % OCTETS
  c = t["channel_base"] + 8 * octet
  ih_first = t["oh0"] - p["pad_top"] + row_begin
  row_lo = min(max(-ih_first, 0), rows)
  row_hi = max(min(p["in_h"] - ih_first, rows), row_lo)
  iw0 = t["col0"] - p["pad_left"]
  clamp = lambda j: min(max(j, 0), sub_pairs)
  lo0, lo1 = clamp(-(iw0 >> 1)), clamp(-((iw0 + 1) >> 1))
  n0 = max(clamp(((p["in_w"] - 1 - iw0) >> 1) + 1) - lo0, 0)
  n1 = max(clamp(((p["in_w"] - 2 - iw0) >> 1) + 1) - lo1, 0)
  images = min(p["batch"] - t["n"], 4) if narrow else 1
  row_stride, pair_stride = p["in_w"] * p["channels"], 2 * p["channels"]
  col_step = staging_cols(rows, sub_pairs)
  row_step = LANES // col_step
  assert col_step <= sub_pairs, "a step crosses at most one image boundary"
  lane = tid // OCTETS
  phase = lane // col_step
  q0 = lane - phase * col_step
  r0 = phase if phase < row_step else rows
  row_src = ((t["n"] * p["in_h"] + ih_first + r0) * p["in_w"] + iw0 + 2 * q0) * p["channels"] + c
  image_src_step = p["in_h"] * row_stride - sub_pairs * pair_stride
  out = []
  r = r0
  while r < rows:
    row_ok = c < p["channels"] and row_lo <= r < row_hi
    slot = row_begin % tile_rows + r
    slot = slot if slot < tile_rows else slot - tile_rows
    dst, src, j, sub, q = slot * pairs + q0, row_src, q0, 0, q0
    while q < pairs:
      ok = row_ok and (not narrow or sub < images)
      ok0, ok1 = ok and 0 <= j - lo0 < n0, ok and 0 <= j - lo1 < n1
      out.append(((octet, r, q), (ok0, ok1, src if ok0 else None, src + p["channels"] if ok1 else None, dst)))
      j, src, dst, q = j + col_step, src + col_step * pair_stride, dst + col_step, q + col_step
      if narrow and j >= sub_pairs:
        j, sub, src = j - sub_pairs, sub + 1, src + image_src_step
    r, row_src = r + row_step, row_src + row_step * row_stride
  return out


def main():
  rng = random.Random(1)
  cases = 0
  for _ in range(2000):
    kernel_w, kernel_h = rng.choice([1, 7, 8, 9, 13, 17, 21, 27, 31, 51, 63, 99, 135]), rng.randint(1, 40)
    split = rng.choice([1, 1, 2, 4])
    out_w = rng.randint(1, 128 // split) if split > 1 else rng.randint(1, 400)
    p = dict(batch=rng.randint(1, 9), in_h=rng.randint(1, 60), in_w=max(1, out_w + rng.randint(-3, 3)),
             channels=rng.choice([8, 13, 16, 24, 40, 4000]), pad_top=rng.randint(-3, 25),
             pad_left=rng.randint(-3, 70))
    g = make_grid(kernel_w, split)
    tile_rows = rng.choice([min(kernel_h + 7, 11), min(kernel_h + 7, 15), min(kernel_h + 7, 16), kernel_h + 7])
    tiles_w = 1 if split > 1 else ceil_div(out_w, 128)
    t = dict(n=rng.randrange(0, p["batch"], split), oh0=8 * rng.randint(0, 8), col0=128 * rng.randrange(tiles_w),
             channel_base=16 * rng.randint(0, ceil_div(p["channels"], 16) - 1))
    row_begin = rng.randint(0, 30)
    row_end = row_begin + rng.randint(1, tile_rows)
    pairs = g["tile_cols"] // 2
    seen = {}
    for tid in range(THREADS):
      for key, item in stepped(p, g, t, row_begin, row_end, tile_rows, tid, split > 1):
        assert key not in seen, (key, p, g, t)
        seen[key] = item
        assert item == reference(p, g, t, row_begin, tile_rows, *key, split > 1), (key, p, g, t)
    expected = {(o, r, q) for o in range(OCTETS) for r in range(row_end - row_begin) for q in range(pairs)}
    assert set(seen) == expected, (p, g, t)
    cases += 1
  print(f"{cases} staging calls: every item staged once, with the indices of its definition")


if __name__ == "__main__":
  main()
