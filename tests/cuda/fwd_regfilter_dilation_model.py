"""A model of the register-filter forward kernel's walk (csrc/fwd/regfilter.cuh) with
dilation: each residue class of output rows and columns read in place, row and column
pitches of d. For one word of the pixel (the words are independent), every thread of
the plan's grid (plan_fwd_launch: strips, row blocks, row residues in blockIdx.y,
column residues in the thread index) replays the kernel's index arithmetic and its
row walk (K rolling accumulator rows, the window's column tests, the stores), and the
result must equal a direct dilated convolution, with
- every output written exactly once, and nothing else written;
- every input read inside the image (rows by [j_lo, j_hi), columns by col_ok).
Checked over 3x3 and 5x5, dilations 1-5 (unequal in H and W too), maps smaller and
larger than the filter's span, one-sided and asymmetric padding, and the forward of the
input gradient (padding (K - 1) d - pad, the filter rotated).
Runs on the CPU: python tests/cuda/fwd_regfilter_dilation_model.py
"""

import itertools
import sys

import numpy as np

THREADS = 128
H100 = dict(sms=132, smem_per_block=232448, smem_per_sm=233472, smem_reserved_per_block=1024, l2_bytes=50 << 20)


def ceil_div(a, b):
  return -(-a // b)


def run(problem, plan, x, w):
  """The kernel's outputs for one word, from the plan's grid: (y, write counts)."""
  p = problem
  k, dh, dw = p["kernel_w"], p["dilation_h"], p["dilation_w"]
  tw = {3: 8, 5: 4, 7: 2}[k]
  win = tw + k - 1
  y = np.full((p["batch"], p["out_h"], p["out_w"]), np.nan)
  writes = np.zeros(y.shape, int)
  lane_words, strips, row_blocks, rpb = plan["lane_words"], plan["strips"], plan["row_blocks"], plan["rows_per_block"]
  grid_x, grid_y = plan["grid"][0], plan["grid"][1]
  for by in range(grid_y):
    for bx in range(grid_x):
      for tid in range(0, THREADS, 32):  # lane 0 of each warp: word 0 of its pixel
        i = bx * THREADS + tid
        if i >= plan["columns"]:
          continue
        if i % lane_words != 0:
          continue  # another word of the same pixel: the same arithmetic
        rest = i // lane_words
        strip, rw, n = rest % strips, rest // strips % dw, rest // strips // dw
        rh, q_begin = by // row_blocks, (by % row_blocks) * rpb
        residue_rows = ceil_div(p["out_h"] - rh, dh)
        rows = min(rpb, residue_rows - q_begin)
        if rows <= 0:
          continue
        residue_cols = ceil_div(p["out_w"] - rw, dw)
        s0 = strip * tw
        if s0 >= residue_cols:
          continue
        ow0 = dw * s0 + rw
        iw0 = ow0 - p["pad_left"]
        col_ok = [0 <= iw0 + dw * c < p["in_w"] for c in range(win)]
        out_cols = min(tw, residue_cols - s0)
        oh_begin = dh * q_begin + rh
        ih_first = oh_begin - p["pad_top"]
        total = rows + k - 1
        below = ceil_div(-ih_first, dh) if ih_first < 0 else 0
        above = ceil_div(p["in_h"] - ih_first, dh) if p["in_h"] > ih_first else 0
        j_lo = min(below, total)
        j_hi = max(min(above, total), j_lo)
        acc = np.zeros((k, tw))
        for j in range(total):
          u = j % k
          inside = j_lo <= j < j_hi
          acc[u, :] = 0.0
          if inside:
            ih = ih_first + dh * j
            assert 0 <= ih < p["in_h"], ("row read outside the image", p, ih)
            for c in range(win):
              if not col_ok[c]:
                continue
              iw = iw0 + dw * c
              v = x[n, ih, iw]
              for kw in range(k):
                t = c - kw
                if 0 <= t < tw:
                  for kh in range(k):
                    acc[(u - kh) % k, t] += v * w[kh, kw]
          if j >= k - 1:
            oh = oh_begin + dh * (j - (k - 1))
            for t in range(out_cols):
              ow = ow0 + dw * t
              y[n, oh, ow] = acc[(u + 1) % k, t]
              writes[n, oh, ow] += 1
  return y, writes


def reference(problem, x, w):
  p = problem
  k, dh, dw = p["kernel_w"], p["dilation_h"], p["dilation_w"]
  y = np.zeros((p["batch"], p["out_h"], p["out_w"]))
  for oh, ow, kh, kw in itertools.product(range(p["out_h"]), range(p["out_w"]), range(k), range(k)):
    ih, iw = oh - p["pad_top"] + dh * kh, ow - p["pad_left"] + dw * kw
    if 0 <= ih < p["in_h"] and 0 <= iw < p["in_w"]:
      y[:, oh, ow] += x[:, ih, iw] * w[kh, kw]
  return y


def problems():
  """(name, forward problem) pairs: registry-like and awkward ones, each also as its
  input gradient's forward."""
  out = []
  for k, (dh, dw), (h, w), (top, bottom), (left, right) in [
      (3, (3, 3), (28, 28), (3, 3), (3, 3)),     # UniRepLKNet's 3x3 d3 (SAME)
      (3, (5, 5), (7, 7), (5, 5), (5, 5)),       # 3x3 d5 on 7x7: the span outgrows the map
      (3, (4, 4), (14, 14), (4, 4), (4, 4)),
      (5, (3, 3), (28, 28), (6, 6), (6, 6)),
      (3, (2, 3), (19, 23), (2, 2), (3, 3)),     # unequal dilations, maps not multiples of d
      (5, (2, 1), (13, 41), (0, 8), (4, 0)),     # padding on one side only
      (3, (3, 2), (8, 6), (0, 0), (0, 0)),       # VALID on a small map (2 x 2 outputs)
      (3, (1, 1), (9, 33), (1, 1), (1, 1)),      # undilated: the walk as before
      (5, (3, 3), (40, 9), (1, 7), (2, 5)),      # asymmetric padding
      (7, (3, 3), (28, 28), (9, 9), (9, 9)),     # VAN's 7x7 d3 (SAME)
      (7, (2, 2), (7, 7), (6, 6), (6, 6)),       # UniRepLKNet's 7x7 d2 on 7x7: the span outgrows the map
      (7, (2, 3), (17, 20), (0, 12), (5, 1)),    # unequal dilations, one-sided and uneven padding
  ]:
    out_h = h + top + bottom - dh * (k - 1)
    out_w = w + left + right - dw * (k - 1)
    base = dict(batch=2, channels=64, kernel_h=k, kernel_w=k, stride_h=1, stride_w=1, dilation_h=dh,
                dilation_w=dw)
    fwd = dict(base, in_h=h, in_w=w, out_h=out_h, out_w=out_w, pad_top=top, pad_left=left)
    # The input gradient as a forward (stride1_bwd_data_as_fwd): dy in, dx out.
    bwd = dict(base, in_h=out_h, in_w=out_w, out_h=h, out_w=w, pad_top=(k - 1) * dh - top,
               pad_left=(k - 1) * dw - left)
    out += [(f"k{k} d{dh}x{dw} {h}x{w} fwd", fwd), (f"k{k} d{dh}x{dw} {h}x{w} bwd_data", bwd)]
  return out


def check(plan_fwd_launch, device=H100):
  errors = []
  rng = np.random.default_rng(0)
  for name, p in problems():
    plan = plan_fwd_launch(p, half_precision=True, device=device)
    if plan["kernel"] != "regfilter":
      errors.append(f"{name}: the plan took {plan['kernel']}")
      continue
    x = rng.uniform(-1, 1, (p["batch"], p["in_h"], p["in_w"]))
    w = rng.uniform(-1, 1, (p["kernel_h"], p["kernel_w"]))
    y, writes = run(p, plan, x, w)
    if not (writes == 1).all():
      errors.append(f"{name}: outputs written {np.unique(writes)} times")
    elif not np.allclose(y, reference(p, x, w), atol=1e-12):
      errors.append(f"{name}: wrong sums")
  return errors


def main():
  from jax_flashdwc import _ffi
  errors = check(_ffi._jax_flashdwc.plan_fwd_launch)
  for e in errors:
    print("FAIL", e)
  print(f"{len(problems())} problems, {len(errors)} failures")
  return 1 if errors else 0


if __name__ == "__main__":
  sys.exit(main())
