"""A model of the tensor-core forward's x staging indices (stage_input in
csrc/dwconv/fwd_mma.cuh): the per-item formulas the loop used before (a division by
the row's word count and 64-bit bounds tests for every item) against the row, word,
ring slot and offset that the loop now carries from item to item, compared item by
item (in-image flags, the global offsets of the items read, the shared-memory word
written) for random geometries, narrow strips and negative or large padding included.

  python tests/cuda/fwd_mma_staging_model.py
"""

import random

THREADS, OCTETS = 256, 2
REST_STEP = THREADS // OCTETS


def ceil_div(a, b):
  return -(-a // b)


def make_grid(kernel_w, split):
  """The x tile row of make_mma_fwd_grid (fwd_mma.cu)."""
  frags = max(1, ceil_div(kernel_w - 1, 8))
  sub_cols = 8 * frags + 128 // split
  return dict(tile_cols=split * sub_cols, sub_pairs=sub_cols // 2, sub_shift={1: 4, 2: 3, 4: 2}[split])


def per_item(p, g, t, row_begin, row_end, tile_rows, tid, narrow):
  pairs = g["tile_cols"] // 2
  ih0, iw0 = t["oh0"] - p["pad_top"], t["col0"] - p["pad_left"]
  slot_begin = row_begin % tile_rows
  out = []
  for it in range(tid, (row_end - row_begin) * pairs * OCTETS, THREADS):
    octet, rest = it % OCTETS, it // OCTETS
    if narrow:
      unit = rest // g["sub_pairs"]
      log2_split = 4 - g["sub_shift"]
      row, sub = unit >> log2_split, unit & ((1 << log2_split) - 1)
      q = rest - row * pairs
    else:
      row, sub = rest // pairs, 0
      q = rest - row * pairs
    n, ih = t["n"] + sub, ih0 + row_begin + row
    slot = slot_begin + row if slot_begin + row < tile_rows else slot_begin + row - tile_rows
    iw, c = iw0 + 2 * (q - sub * g["sub_pairs"]), t["channel_base"] + 8 * octet
    row_ok = (not narrow or n < p["batch"]) and 0 <= ih < p["in_h"] and c < p["channels"]
    ok0, ok1 = row_ok and 0 <= iw < p["in_w"], row_ok and 0 <= iw + 1 < p["in_w"]
    offset = ((n * p["in_h"] + ih) * p["in_w"] + iw) * p["channels"] + c
    out.append((ok0, ok1, offset if ok0 else None, offset + p["channels"] if ok1 else None,
                (octet, slot * pairs + q)))
  return out


def carried(p, g, t, row_begin, row_end, tile_rows, tid, narrow):
  pairs, sub_pairs = g["tile_cols"] // 2, g["sub_pairs"]
  rows = row_end - row_begin
  items = rows * pairs * OCTETS
  octet = tid % OCTETS
  c = t["channel_base"] + 8 * octet
  ih_first = t["oh0"] - p["pad_top"] + row_begin
  row_lo = min(max(-ih_first, 0), rows)
  row_hi = max(min(p["in_h"] - ih_first, rows), row_lo)
  iw0 = t["col0"] - p["pad_left"]
  clamp = lambda j: min(max(j, 0), sub_pairs)
  lo0, hi0 = clamp(-(iw0 >> 1)), clamp(((p["in_w"] - 1 - iw0) >> 1) + 1)
  lo1, hi1 = clamp(-((iw0 + 1) >> 1)), clamp(((p["in_w"] - 2 - iw0) >> 1) + 1)
  images = min(p["batch"] - t["n"], 4) if narrow else 1
  row_stride = p["in_w"] * p["channels"]
  image_stride, pair_stride = p["in_h"] * row_stride, 2 * p["channels"]
  rest = tid // OCTETS
  s = dict(row=rest // pairs)
  s["q"] = rest - s["row"] * pairs
  slot = row_begin % tile_rows + s["row"]
  s["slot"] = slot if slot < tile_rows else slot - tile_rows
  s["row_offset"] = ((t["n"] * p["in_h"] + ih_first + s["row"]) * p["in_w"] + iw0) * p["channels"] + c

  def advance():
    s["q"] += REST_STEP
    for _ in range(2):
      if s["q"] >= pairs:
        s["q"] -= pairs
        s["row"] += 1
        s["row_offset"] += row_stride
        s["slot"] = 0 if s["slot"] + 1 == tile_rows else s["slot"] + 1
    assert s["q"] < pairs

  def load():
    sub, j = 0, s["q"]
    if narrow:
      for _ in range(3):
        if j >= sub_pairs:
          j -= sub_pairs
          sub += 1
    row_ok = c < p["channels"] and row_lo <= s["row"] < row_hi and (not narrow or sub < images)
    ok0, ok1 = row_ok and lo0 <= j < hi0, row_ok and lo1 <= j < hi1
    offset = s["row_offset"] + (sub * image_stride if narrow else 0) + j * pair_stride
    return (ok0, ok1, offset if ok0 else None, offset + p["channels"] if ok1 else None,
            (octet, s["slot"] * pairs + s["q"]))

  out, it = [], tid
  while it + THREADS < items:
    out.append(load())
    advance()
    out.append(load())
    advance()
    it += 2 * THREADS
  if it < items:
    out.append(load())
  return out


def main():
  rng = random.Random(1)
  cases = 0
  for _ in range(3000):
    kernel_w, kernel_h = rng.choice([1, 7, 8, 9, 13, 17, 21, 27, 31, 51, 63, 99, 135]), rng.randint(1, 40)
    split = rng.choice([1, 1, 2, 4])
    out_w = rng.randint(1, 128 // split) if split > 1 else rng.randint(1, 400)
    p = dict(batch=rng.randint(1, 9), in_h=rng.randint(1, 60), in_w=max(1, out_w + rng.randint(-3, 3)),
             channels=rng.choice([8, 13, 16, 24, 40, 4000]), pad_top=rng.randint(-3, 25),
             pad_left=rng.randint(-3, 70))
    g = make_grid(kernel_w, split)
    assert g["tile_cols"] // 2 >= 68, "carried() wraps the word at most twice a step"
    tile_rows = rng.choice([min(kernel_h + 7, 15), min(kernel_h + 7, 16), min(kernel_h + 7, 11)])
    tiles_w = 1 if split > 1 else ceil_div(out_w, 128)
    t = dict(n=rng.randrange(0, p["batch"], split), oh0=8 * rng.randint(0, 8), col0=128 * rng.randrange(tiles_w),
             channel_base=16 * rng.randint(0, ceil_div(p["channels"], 16) - 1))
    row_begin = rng.randint(0, 30)
    row_end = row_begin + rng.randint(1, tile_rows)
    for tid in rng.sample(range(THREADS), 12) + [0, 1, THREADS - 2, THREADS - 1]:
      args = (p, g, t, row_begin, row_end, tile_rows, tid, split > 1)
      assert per_item(*args) == carried(*args), args
      cases += 1
  print(f"{cases} thread cases: the carried indices match the per-item ones")


if __name__ == "__main__":
  main()
