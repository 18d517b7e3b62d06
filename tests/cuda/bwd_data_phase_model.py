"""A numpy model of the stride-2 polyphase input-gradient kernel (csrc/bwd_data/phase.cuh
with csrc/bwd_data/phase_index.h): the same grid, slot decoding, ring slots, taps and
masks, thread by thread, against a direct transposed convolution. Small random
problems: odd and even H and W, paddings 0..K-1 on each side (and a crop), K = 3 and
5, several rows a thread. Runs on the CPU: python tests/cuda/bwd_data_phase_model.py
"""

import itertools
import sys

import numpy as np


def floor_half(a):
  return a // 2  # Python's floor division, as floor_half


def phase_range(size, pad):
  if size <= 0:
    return 0, 0
  first = floor_half(pad)
  return first, floor_half(size - 1 + pad) - first + 1


def make_grid(p, width, rows_per_thread):
  r_first, r_count = phase_range(p["in_h"], p["pad_top"])
  s_first, s_count = phase_range(p["in_w"], p["pad_left"])
  rows_per_thread = max(rows_per_thread, 1)
  runs = (r_count + rows_per_thread - 1) // rows_per_thread
  groups = p["channels"] // width
  return dict(r_first=r_first, r_count=r_count, s_first=s_first, s_count=s_count, rows_per_thread=rows_per_thread,
              runs=runs, groups=groups, slots=runs * s_count * groups)


def kernel(dy, w, p, g, width, K, threads=128):
  """dwconv_bwd_data_phase_kernel, one thread at a time; dx starts as NaN so that a
  position no thread writes shows."""
  N, out_h, out_w, C = dy.shape
  in_h, in_w = p["in_h"], p["in_w"]
  pad_top, pad_left = p["pad_top"], p["pad_left"]
  dx = np.full((N, in_h, in_w, C), np.nan, np.float64)
  J = (K - 1) // 2
  ring_len = J + 1
  blocks = (g["slots"] + threads - 1) // threads
  for bx, tx in itertools.product(range(blocks), range(threads)):
    slot = bx * threads + tx
    if slot >= g["slots"]:
      continue
    groups, s_count = g["groups"], g["s_count"]
    rest = slot // groups
    group = slot - rest * groups
    run = rest // s_count
    s = g["s_first"] + (rest - run * s_count)
    r_begin = g["r_first"] + run * g["rows_per_thread"]
    r_end = min(r_begin + g["rows_per_thread"], g["r_first"] + g["r_count"])
    c = group * width
    wf = w[:, :, c:c + width].astype(np.float64)
    col_in = [0 <= s - j < out_w for j in range(ring_len)]
    iw0 = 2 * s - pad_left
    store_col = [0 <= iw0 < in_w, 0 <= iw0 + 1 < in_w]
    for n in range(N):  # blockIdx.y's grid-stride loop

      def load_row(r):
        row_in = 0 <= r < out_h
        return [dy[n, r, s - j, c:c + width].astype(np.float64) if row_in and col_in[j] else np.zeros(width)
                for j in range(ring_len)]

      ring = [None] * ring_len
      for i in range(J):
        ring[i] = load_row(r_begin - J + i)
      nxt = load_row(r_begin)
      r0 = r_begin
      while r0 < r_end:
        for u in range(ring_len):
          now = (J + u) % ring_len
          r = r0 + u
          if r >= r_end:
            continue
          ring[now] = nxt
          if r + 1 < r_end:
            nxt = load_row(r + 1)
          for e in range(2):
            ih = 2 * r + e - pad_top
            if ih < 0 or ih >= in_h:
              continue
            for f in range(2):
              if not store_col[f]:
                continue
              acc = np.zeros(width)
              a = 0
              while e + 2 * a < K:
                b = 0
                while f + 2 * b < K:
                  acc += ring[(now - a + ring_len) % ring_len][b] * wf[e + 2 * a, f + 2 * b]
                  b += 1
                a += 1
              assert np.isnan(dx[n, ih, iw0 + f, c]).all(), "a dx position written twice"
              dx[n, ih, iw0 + f, c:c + width] = acc
        r0 += ring_len
  return dx


def reference(dy, w, in_h, in_w, pad_top, pad_left):
  """dx of y = conv(x, w), stride 2: each dy position scatters into its window."""
  N, out_h, out_w, C = dy.shape
  K = w.shape[0]
  dx = np.zeros((N, in_h, in_w, C))
  for oh, ow, kh, kw in itertools.product(range(out_h), range(out_w), range(K), range(K)):
    ih, iw = 2 * oh - pad_top + kh, 2 * ow - pad_left + kw
    if 0 <= ih < in_h and 0 <= iw < in_w:
      dx[:, ih, iw, :] += dy[:, oh, ow, :] * w[kh, kw, :]
  return dx


def rows_per_thread(p, width, sms):
  """bwd_data_phase_rows_per_thread."""
  _, r_count = phase_range(p["in_h"], p["pad_top"])
  _, s_count = phase_range(p["in_w"], p["pad_left"])
  positions = p["batch"] * r_count * s_count * (p["channels"] // width)
  return min(max(positions // (2048 * sms), 1), 16)


def check(rng, K, in_h, in_w, pads, width, rows, N=2, C=8):
  pt, pb, pl, pr = pads
  out_h = (in_h + pt + pb - K) // 2 + 1
  out_w = (in_w + pl + pr - K) // 2 + 1
  if out_h <= 0 or out_w <= 0:
    return 0
  p = dict(batch=N, in_h=in_h, in_w=in_w, out_h=out_h, out_w=out_w, channels=C, pad_top=pt, pad_left=pl)
  dy = rng.standard_normal((N, out_h, out_w, C))
  w = rng.standard_normal((K, K, C))
  g = make_grid(p, width, rows)
  got = kernel(dy, w, p, g, width, K)
  want = reference(dy, w, in_h, in_w, pt, pl)
  assert not np.isnan(got).any(), f"unwritten dx positions: K={K} {in_h}x{in_w} pads={pads} rows={rows}"
  np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12,
                             err_msg=f"K={K} {in_h}x{in_w} pads={pads} width={width} rows={rows}")
  return 1


def main():
  rng = np.random.default_rng(0)
  checked = 0
  for K in (3, 5):
    for in_h, in_w in ((1, 1), (2, 3), (5, 4), (7, 9), (8, 8), (11, 6)):
      for pads in itertools.product(range(K), repeat=4):
        # Every padding on a small map; a sample of them on the larger ones.
        if in_h * in_w > 12 and rng.random() > 0.08:
          continue
        for rows in (1, 2, 3, 16):
          checked += check(rng, K, in_h, in_w, pads, 4 if K == 3 else 2, rows)
    # Crops (negative padding before), and the launcher's rows a thread.
    for pads in ((-1, 2, -2, 1), (-2, 0, 1, -1), (3, -1, -1, 4)):
      checked += check(rng, K, 13, 12, pads, 8, 3, C=16)
    p = dict(batch=2, in_h=15, in_w=13, channels=16, pad_top=1, pad_left=1)
    checked += check(rng, K, 15, 13, (1, 1, 1, 1), 8, rows_per_thread(p, 8, sms=1), C=16)
  print(f"bwd_data phase model: {checked} problems match the transposed convolution")
  return 0


if __name__ == "__main__":
  sys.exit(main())
