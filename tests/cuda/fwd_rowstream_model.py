"""A model of the row-stream forward kernel's indexing (csrc/fwd/rowstream.cuh
and its launch plan in plan/fwd_launch.cc), in numpy: the grid decode, each thread's copies
into the ring of input rows, and each thread's reads and stores, for one and two
images a strip. Checked against a direct sum; every output starts as NaN and must be
written exactly once, and every ring slot read must hold the row the read expects.

  python tests/cuda/fwd_rowstream_model.py
"""

import numpy as np

THREADS, GROUPS, PREFETCH = 128, 8, 2
TARGET_BLOCKS, MIN_ROWS = 2048, 16


def direct(x, w, pad_top, pad_left, out_h, out_w):
  _, h, wd, _ = x.shape
  kh_, kw_, _ = w.shape
  bottom, right = max(0, out_h + kh_ - 1 - pad_top - h), max(0, out_w + kw_ - 1 - pad_left - wd)
  xp = np.pad(x, ((0, 0), (pad_top, bottom), (pad_left, right), (0, 0)))
  y = np.zeros((x.shape[0], out_h, out_w, x.shape[3]))
  for i in range(kh_):
    for j in range(kw_):
      y += xp[:, i:i + out_h, j:j + out_w] * w[i, j]
  return y


def model(x, w, pad_top, pad_left, out_h, out_w, width, tm, images):
  n_, in_h, in_w, channels = x.shape
  kh_, kw_, _ = w.shape
  block_channels = GROUPS * width
  column_threads = THREADS // GROUPS
  sub_width = column_threads * tm // images
  sub_columns = sub_width + kw_ - 1
  image_threads = column_threads // images
  row_columns = images * sub_columns
  row_chunks = row_columns * GROUPS
  copies = -(-row_chunks // THREADS)
  image_groups = -(-n_ // images)
  strips = -(-out_w // sub_width)
  channel_blocks = -(-channels // block_channels)
  base = max(image_groups * strips * channel_blocks, 1)
  row_blocks = min(max(-(-TARGET_BLOCKS // base), 1), out_h)
  rows_per_block = max(-(-out_h // row_blocks), min(out_h, MIN_ROWS))
  row_blocks = -(-out_h // rows_per_block)
  ring_rows = kh_ + PREFETCH
  y = np.full((n_, out_h, out_w, channels), np.nan)
  for block in range(image_groups * strips * row_blocks * channel_blocks):
    spatial = block // channel_blocks
    strip = spatial % strips
    row_block = (spatial // strips) % row_blocks
    n = spatial // (strips * row_blocks) * images
    channel_base = block % channel_blocks * block_channels
    ow_begin = strip * sub_width
    row_begin = row_block * rows_per_block
    rows = min(row_begin + rows_per_block, out_h) - row_begin
    ih_begin, iw_begin = row_begin - pad_top, ow_begin - pad_left
    input_rows = rows + kh_ - 1
    ring = np.full((ring_rows, row_columns, block_channels), np.nan)
    tag = [None] * ring_rows

    def load_row(j, slot):
      if j >= input_rows:
        return
      ih = ih_begin + j
      row_inside = 0 <= ih < in_h
      for t in range(THREADS):
        for i in range(copies):
          q = t + i * THREADS
          if q >= row_chunks:
            continue
          col, grp = q // GROUPS, q % GROUPS
          image = col // sub_columns
          iw = iw_begin + col % sub_columns
          c = channel_base + grp * width
          valid = row_inside and 0 <= iw < in_w and c < channels and n + image < n_
          ring[slot, col, grp * width:(grp + 1) * width] = x[n + image, ih, iw, c:c + width] if valid else 0.0
      tag[slot] = j

    for j in range(ring_rows - 1):
      load_row(j, j)
    first_slot = 0
    for o in range(rows):
      load_row(o + ring_rows - 1, ring_rows - 1 if first_slot == 0 else first_slot - 1)
      for t in range(THREADS):
        group, column_thread = t % GROUPS, t // GROUPS
        image = column_thread // image_threads
        ring_col = image * sub_columns + column_thread % image_threads * tm
        ow0 = ow_begin + column_thread % image_threads * tm
        c0 = channel_base + group * width
        chans = slice(group * width, (group + 1) * width)
        acc = np.zeros((tm, width))
        slot = first_slot
        for kh in range(kh_):
          assert tag[slot] == o + kh, (o, kh, tag[slot])
          for kw in range(kw_):
            wv = w[kh, kw, c0:c0 + width] if c0 < channels else np.zeros(width)
            for t_ in range(tm):
              acc[t_] += ring[slot, ring_col + kw + t_, chans] * wv
          slot = 0 if slot + 1 == ring_rows else slot + 1
        if c0 >= channels or n + image >= n_:
          continue
        for t_ in range(tm):
          if ow0 + t_ < out_w:
            dst = y[n + image, row_begin + o, ow0 + t_, c0:c0 + width]
            assert np.isnan(dst).all(), "an output written twice"
            y[n + image, row_begin + o, ow0 + t_, c0:c0 + width] = acc[t_]
      first_slot = 0 if first_slot + 1 == ring_rows else first_slot + 1
  return y


def main():
  rng = np.random.default_rng(0)
  cases = [  # (n, h, w, c, kh, kw, pad_top, pad_left, out_h, out_w, width, tm, images)
      (3, 11, 30, 72, 5, 5, 2, 2, 11, 30, 8, 4, 2),   # two images, odd batch, ragged channels
      (2, 9, 32, 64, 3, 3, 1, 1, 9, 32, 8, 4, 2),     # two images, 32 wide
      (4, 20, 7, 16, 7, 7, 3, 3, 20, 7, 8, 4, 2),     # 7 wide, two row blocks
      (1, 12, 24, 64, 9, 3, 4, 1, 12, 24, 8, 4, 2),   # one image in a two-image strip
      (2, 10, 28, 8, 3, 7, 0, 6, 8, 28, 8, 4, 2),     # padding on the left only
      (2, 9, 40, 32, 3, 3, 1, 1, 9, 40, 4, 4, 1),     # one image, 64-column strips
      (1, 9, 12, 16, 5, 5, 2, 2, 9, 12, 4, 2, 1),     # one image, 2 outputs a thread
  ]
  for n, h, wd, c, kh, kw, pt, pl, oh, ow, width, tm, images in cases:
    x = rng.uniform(-1, 1, (n, h, wd, c))
    w = rng.uniform(-1, 1, (kh, kw, c))
    want = direct(x, w, pt, pl, oh, ow)
    got = model(x, w, pt, pl, oh, ow, width, tm, images)
    assert not np.isnan(got).any(), "an output never written"
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    print(f"ok: n={n} {h}x{wd}x{c} filter {kh}x{kw} pad ({pt},{pl}) out {oh}x{ow} "
          f"width {width} kTM {tm}, {images} image(s) a strip")


if __name__ == "__main__":
  main()
