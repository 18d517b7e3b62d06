"""A numpy model of the stride-2 forward kernel (csrc/fwd/stride2.cuh with
csrc/fwd/stride2_index.h): the same grid, slot decoding, window slots, reload order,
taps and masks, thread by thread, against a direct convolution. Small random problems:
odd and even H and W, paddings 0..K-1 on each side, crops, K = 3 and 5, 1..16 rows a
thread, a flipped filter, and a filter with infinities (padding must not meet them).
Runs on the CPU: python tests/cuda/fwd_stride2_model.py
"""

import itertools
import sys

import numpy as np


def make_grid(p, width, rows_per_thread):
  rows_per_thread = max(rows_per_thread, 1)
  runs = 0 if p["out_h"] <= 0 else (p["out_h"] + rows_per_thread - 1) // rows_per_thread
  groups = p["channels"] // width
  return dict(rows_per_thread=rows_per_thread, runs=runs, groups=groups, slots=runs * max(p["out_w"], 0) * groups)


def rows_per_thread(p, width, sms):
  """fwd_stride2_rows_per_thread."""
  positions = p["batch"] * p["out_h"] * p["out_w"] * (p["channels"] // width)
  return min(max(positions // (2048 * sms), 1), 16)


def kernel(x, w, p, g, width, K, flip=False, threads=128):
  """dwconv_fwd_stride2_kernel, one thread at a time; y starts as NaN so that a position
  no thread writes shows. Records every load so that an out-of-bounds one shows."""
  N, in_h, in_w, C = x.shape
  out_h, out_w = p["out_h"], p["out_w"]
  pad_top, pad_left = p["pad_top"], p["pad_left"]
  y = np.full((N, out_h, out_w, C), np.nan, np.float64)
  blocks = (g["slots"] + threads - 1) // threads
  for bx, tx in itertools.product(range(blocks), range(threads)):
    slot = bx * threads + tx
    if slot >= g["slots"]:
      continue
    groups = g["groups"]
    rest = slot // groups
    group = slot - rest * groups
    run = rest // out_w
    ow = rest - run * out_w
    o_begin = run * g["rows_per_thread"]
    o_end = min(o_begin + g["rows_per_thread"], out_h)
    c = group * width
    iw0 = 2 * ow - pad_left
    col_in = [0 <= iw0 + j < in_w for j in range(K)]
    wr = [[None] * K for _ in range(K)]
    for kh in range(K):
      for kw in range(K):
        tap = (K - 1 - kh) * K + (K - 1 - kw) if flip else kh * K + kw
        wr[kh][kw] = w.reshape(K * K, C)[tap, c:c + width].astype(np.float64) if col_in[kw] else np.zeros(width)
    for n in range(N):  # blockIdx.y's grid-stride loop
      ih_first = 2 * o_begin - pad_top

      def load_row(t):
        ih = ih_first + t
        row_in = 0 <= ih < in_h
        out = []
        for j in range(K):
          if row_in and col_in[j]:
            assert 0 <= ih < in_h and 0 <= iw0 + j < in_w and c + width <= C
            out.append(x[n, ih, iw0 + j, c:c + width].astype(np.float64))
          else:
            out.append(np.zeros(width))
        return out

      win = [load_row(t) for t in range(K)]
      o0 = o_begin
      while o0 < o_end:
        for u in range(K):
          o = o0 + u
          if o >= o_end:
            continue
          ih0 = 2 * o - pad_top
          i2 = 2 * (o - o_begin)
          acc = np.zeros(width)

          def row_fma(k):
            nonlocal acc
            slot_ = (2 * u + k) % K
            if ih0 + k < 0 or ih0 + k >= in_h:
              return
            # The slot must hold run row 2i + k (input row ih0 + k).
            for j in range(K):
              acc = acc + win[slot_][j] * wr[k][j]

          row_fma(0)
          row_fma(1)
          if o + 1 < o_end:
            win[(2 * u) % K] = load_row(i2 + K)
            win[(2 * u + 1) % K] = load_row(i2 + K + 1)
          for k in range(2, K):
            row_fma(k)
          assert np.isnan(y[n, o, ow, c]).all(), "a y position written twice"
          y[n, o, ow, c:c + width] = acc
        o0 += K
  return y


def reference(x, w, out_h, out_w, pad_top, pad_left, flip=False):
  """y = conv(x, w), stride 2, summing only the taps inside the image."""
  N, in_h, in_w, C = x.shape
  K = w.shape[0]
  wf = w[::-1, ::-1] if flip else w
  y = np.zeros((N, out_h, out_w, C))
  for oh, ow, kh, kw in itertools.product(range(out_h), range(out_w), range(K), range(K)):
    ih, iw = 2 * oh - pad_top + kh, 2 * ow - pad_left + kw
    if 0 <= ih < in_h and 0 <= iw < in_w:
      y[:, oh, ow, :] += x[:, ih, iw, :] * wf[kh, kw, :]
  return y


def check(rng, K, in_h, in_w, pads, width, rows, N=2, C=8, flip=False, inf_filter=False):
  pt, pb, pl, pr = pads
  out_h = (in_h + pt + pb - K) // 2 + 1
  out_w = (in_w + pl + pr - K) // 2 + 1
  if out_h <= 0 or out_w <= 0:
    return 0
  p = dict(batch=N, in_h=in_h, in_w=in_w, out_h=out_h, out_w=out_w, channels=C, pad_top=pt, pad_left=pl)
  x = rng.standard_normal((N, in_h, in_w, C))
  w = rng.standard_normal((K, K, C))
  if inf_filter:
    w[0, 0, :] = np.inf  # reached only by the positions whose tap (0, 0) is inside
  g = make_grid(p, width, rows)
  with np.errstate(invalid="ignore"):
    got = kernel(x, w, p, g, width, K, flip=flip)
    want = reference(x, w, out_h, out_w, pt, pl, flip=flip)
  msg = f"K={K} {in_h}x{in_w} pads={pads} width={width} rows={rows} flip={flip} inf={inf_filter}"
  if inf_filter:
    # The kernel's order of sums differs from the reference's; compare where finite
    # and require the same non-finite positions.
    assert (np.isfinite(got) == np.isfinite(want)).all(), msg
    got, want = np.where(np.isfinite(got), got, 0), np.where(np.isfinite(want), want, 0)
  else:
    assert not np.isnan(got).any(), f"unwritten y positions: {msg}"
  np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=msg)
  return 1


def main():
  rng = np.random.default_rng(0)
  checked = 0
  for K in (3, 5):
    width = 4 if K == 3 else 2
    for in_h, in_w in ((1, 1), (2, 3), (3, 3), (5, 4), (7, 9), (8, 8), (11, 6), (13, 12)):
      for pads in itertools.product(range(K), repeat=4):
        # Every padding on a small map; a sample of them on the larger ones.
        if in_h * in_w > 12 and rng.random() > 0.06:
          continue
        for rows in (1, 2, 3, 4, 5, 7, 16):
          checked += check(rng, K, in_h, in_w, pads, width, rows)
    # Crops (negative padding before), flips, an infinite filter tap, the launcher's
    # rows a thread.
    for pads in ((-1, 2, -2, 1), (-2, 0, 1, -1), (3, -1, -1, 4)):
      for rows in (1, 3, 6):
        checked += check(rng, K, 13, 12, pads, 8, rows, C=16)
    for rows in (1, 2, 5, 16):
      checked += check(rng, K, 12, 11, (K // 2, K // 2, K // 2, K // 2), width, rows, flip=True)
      checked += check(rng, K, 12, 11, (K // 2, K // 2 + 1, K - 1, 0), width, rows, inf_filter=True)
    for in_h in range(1, 24, 3):
      p = dict(batch=2, in_h=in_h, in_w=9, channels=16, pad_top=1, pad_left=1)
      p["out_h"], p["out_w"] = (in_h + 2 - K) // 2 + 1, (9 + 2 - K) // 2 + 1
      if p["out_h"] > 0:
        checked += check(rng, K, in_h, 9, (1, 1, 1, 1), 8, rows_per_thread(p, 8, sms=1), C=16)
  print(f"fwd stride2 model: {checked} problems match the direct convolution")
  return 0


if __name__ == "__main__":
  sys.exit(main())
