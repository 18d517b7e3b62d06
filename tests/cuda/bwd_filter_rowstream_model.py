"""A line-by-line model of the row-stream filter-gradient kernel's indexing
(csrc/bwd_filter/rowstream.cuh and its launch in plan/bwd_filter_launch.cc and
bwd_filter/launch.cuh), in numpy, checked against a direct sum. Each ring slot
carries the row it holds and each copy the commit group it belongs to, so a read of
a slot that a later copy overwrote, or of a row whose group the wait did not cover,
fails here.

  python tests/cuda/bwd_filter_rowstream_model.py
"""

import numpy as np

THREADS, GROUPS, WORKERS, PREFETCH = 128, 8, 16, 2
MIN_ROWS = 16


def direct(x, dy, kh_, kw_, pad_top, pad_left):
  n, h, w, c = x.shape
  _, ho, wo, _ = dy.shape
  dw = np.zeros((kh_, kw_, c))
  xp = np.zeros((n, h + ho + kh_, w + wo + kw_, c))
  xp[:, pad_top:pad_top + h, pad_left:pad_left + w] = x
  for i in range(kh_):
    for j in range(kw_):
      dw[i, j] = np.einsum("nhwc,nhwc->c", dy, xp[:, i:i + ho, j:j + wo])
  return dw


def check_copy_passes(strip, kw_):
  """Thread t copies channel group t % 8 of columns t / 8 + 16 i (the kernel's passes):
  every (column, group) of a row once, into slot element t + 128 i, none past the row."""
  x_cols = strip + kw_ - 1
  for columns in (x_cols, strip):
    passes = -(-columns // (THREADS // GROUPS))
    seen = {}
    for t in range(THREADS):
      col0, grp = t // GROUPS, t % GROUPS
      for i in range(passes):
        col = col0 + i * (THREADS // GROUPS)
        if col >= columns:  # the kernel skips this copy (last pass only)
          assert i == passes - 1
          continue
        q = t + i * THREADS
        assert q == col * GROUPS + grp and q not in seen
        seen[q] = (col, grp)
    assert len(seen) == columns * GROUPS


def runs_per_strip(sequence_rows, strips_and_channel_blocks, resident_blocks):
  runs = max(resident_blocks // max(strips_and_channel_blocks, 1), 1)
  return min(runs, max(sequence_rows // MIN_ROWS, 1))


def model(x, dy, kh_, kw_, pad_top, pad_left, width, resident_blocks):
  n_, in_h, in_w, channels = x.shape
  _, out_h, out_w, _ = dy.shape
  strip = 32 if out_w <= 32 else 64
  block_channels = GROUPS * width
  strips = -(-out_w // strip)
  channel_blocks = -(-channels // block_channels)
  image_rows = out_h + kh_ - 1
  sequence_rows = n_ * image_rows - (kh_ - 1)
  runs = runs_per_strip(sequence_rows, strips * channel_blocks, resident_blocks)
  rows_per_block = -(-sequence_rows // runs)
  row_blocks = -(-sequence_rows // rows_per_block)
  x_ring, segments, dy_ring = kh_ + PREFETCH, WORKERS // kh_, PREFETCH + 1
  ws = np.zeros((kh_, kw_, channels))
  x_cols = strip + kw_ - 1
  crossed = 0  # blocks whose run crosses into another image
  for bx in range(strips * row_blocks):
    for by in range(channel_blocks):
      s_ = bx % strips
      row_block = bx // strips
      channel_base = by * block_channels
      ow_begin = s_ * strip
      row_begin = row_block * rows_per_block
      rows = min(row_begin + rows_per_block, sequence_rows) - row_begin
      iw_begin = ow_begin - pad_left
      input_rows = rows + kh_ - 1
      crossed += (row_begin + input_rows - 1) // image_rows != row_begin // image_rows
      first = [row_begin // image_rows, row_begin % image_rows]
      next_x, next_dy, next_out = list(first), list(first), list(first)

      def advance(at):
        at[1] += 1
        if at[1] == image_rows:
          at[0], at[1] = at[0] + 1, 0

      xs = np.full((x_ring, x_cols, block_channels), np.nan)
      xs_tag = [None] * x_ring  # (row, group) each slot holds
      ds = np.full((dy_ring, strip, block_channels), np.nan)
      ds_tag = [None] * dy_ring
      committed = 0

      def load_x_row(j):
        if j >= input_rows:
          return
        n, ih = next_x[0], next_x[1] - pad_top
        advance(next_x)
        slot = j % x_ring
        for col in range(x_cols):
          iw = iw_begin + col
          for grp in range(GROUPS):
            c = channel_base + grp * width
            valid = 0 <= ih < in_h and 0 <= iw < in_w and c < channels
            xs[slot, col, grp * width:(grp + 1) * width] = x[n, ih, iw, c:c + width] if valid else 0.0
        xs_tag[slot] = (j, committed)

      def load_dy_row(o):
        if o >= rows:
          return
        n, oh = next_dy
        advance(next_dy)
        slot = o % dy_ring
        for col in range(strip):
          ow = ow_begin + col
          for grp in range(GROUPS):
            c = channel_base + grp * width
            valid = oh < out_h and ow < out_w and c < channels
            ds[slot, col, grp * width:(grp + 1) * width] = dy[n, oh, ow, c:c + width] if valid else 0.0
        ds_tag[slot] = (o, committed)

      for j in range(x_ring - 1):
        load_x_row(j)
        if j < PREFETCH:
          load_dy_row(j)
        committed += 1
      acc = np.zeros((WORKERS, GROUPS, kw_, width))
      for o in range(rows):
        landed = committed - (PREFETCH - 1)  # groups [0, landed) are complete after the wait
        # Reads of iteration o happen after the copies issued below, which model the
        # other threads racing ahead: the copies of iteration o may not touch a slot
        # iteration o reads. Check the tags before and after.
        snapshots = []
        for worker in range(WORKERS):
          kh, seg = worker % kh_, worker // kh_
          if seg >= segments:
            continue
          x_slot, dy_slot = (o + kh) % x_ring, o % dy_ring
          snapshots.append((worker, kh, seg, x_slot, dy_slot))
          assert xs_tag[x_slot][0] == o + kh and xs_tag[x_slot][1] < landed, (o, kh, xs_tag[x_slot], landed)
          assert ds_tag[dy_slot][0] == o and ds_tag[dy_slot][1] < landed, (o, ds_tag[dy_slot], landed)
        load_x_row(o + x_ring - 1)
        load_dy_row(o + PREFETCH)
        committed += 1
        real = next_out[1] < out_h
        advance(next_out)
        if not real:  # a row between two images: skipped, its x may be the next image's
          continue
        for worker, kh, seg, x_slot, dy_slot in snapshots:
          assert xs_tag[x_slot][0] == o + kh and ds_tag[dy_slot][0] == o, "a copy overwrote a slot being read"
          seg_begin = seg * strip // segments
          count = (seg + 1) * strip // segments - seg_begin
          for grp in range(GROUPS):
            chans = slice(grp * width, (grp + 1) * width)
            for r in range(count):
              g = ds[dy_slot, seg_begin + r, chans]
              for kw in range(kw_):
                acc[worker, grp, kw] += xs[x_slot, seg_begin + r + kw, chans] * g
      for grp in range(GROUPS):
        c0 = channel_base + grp * width
        if c0 >= channels:
          continue
        for kh in range(kh_):
          total = acc[kh, grp].copy()
          for s in range(1, segments):
            total += acc[s * kh_ + kh, grp]
          ws[kh, :, c0:c0 + width] += total
  return ws, crossed


def main():
  rng = np.random.default_rng(0)
  # (n, h, w, c, kh, kw, pad_top, pad_left, out_h, out_w, width, resident blocks); the
  # resident counts are small so that runs of 16 rows and more cross between images.
  cases = [
      (2, 9, 70, 16, 3, 3, 1, 1, 9, 70, 8, 396),    # SAME, two 64-column strips, one run each
      (5, 9, 70, 16, 3, 3, 1, 1, 9, 70, 8, 6),      # 3 runs of 18 rows over 5 images
      (1, 12, 20, 8, 5, 5, 2, 2, 12, 20, 8, 396),   # narrow strip
      (4, 12, 20, 8, 5, 5, 2, 2, 12, 20, 8, 3),     # 3 runs of 22 rows: halos across images
      (1, 10, 33, 12, 7, 7, 3, 3, 10, 33, 4, 396),  # fp32 width, 33 columns: one 64 strip
      (1, 20, 24, 8, 16, 3, 0, 0, 5, 22, 8, 396),   # VALID, KH 16: one segment
      (3, 20, 24, 8, 16, 3, 0, 0, 5, 22, 8, 2),     # KH 16 over 3 images, 2 runs of 20 rows
      (2, 40, 18, 8, 1, 5, 0, 2, 40, 18, 4, 5),     # KH 1: 16 segments, 5 runs of 16 rows
      (1, 7, 9, 8, 7, 7, 6, 0, 7, 3, 8, 396),       # padding above only, wide filter over a small map
      (3, 6, 40, 24, 2, 3, 1, 1, 6, 40, 8, 396),    # even KH, 24 channels: a partial channel block
      (7, 6, 40, 24, 2, 3, 1, 1, 6, 40, 8, 6),      # even KH over 7 images, 3 runs of 16 rows
  ]
  for strip in (32, 64):
    for kw in (3, 5, 7):
      check_copy_passes(strip, kw)
  crossed = 0
  for n, h, w, c, kh, kw, pt, pl, oh, ow, width, resident in cases:
    x = rng.uniform(-1, 1, (n, h, w, c))
    dy = rng.uniform(-1, 1, (n, oh, ow, c))
    want = direct(x, dy, kh, kw, pt, pl)
    got, case_crossed = model(x, dy, kh, kw, pt, pl, width, resident)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    crossed += case_crossed
    print(f"ok: n={n} {h}x{w}x{c} filter {kh}x{kw} pad ({pt},{pl}) out {oh}x{ow} width {width}, "
          f"{case_crossed} blocks crossing images")
  assert crossed > 0, "no case crossed from one image into the next"


if __name__ == "__main__":
  main()
