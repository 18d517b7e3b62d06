"""CPU model of the 1-D window kernels' loops (csrc/conv1d/conv1d_kernels.cuh).

conv1d_fwd_window and the backward window kernel walk a run of positions with a
register window, a halo, U positions loaded ahead and, backward, an input gradient
that is stored once all its contributions have passed; bwd_window is
conv1d_bwd_window_split with `warps` sub-runs a chunk (the library launches 4; 1-4
are checked), their partials summed in warp order. conv1d_fwd_plain (no segments,
no state) loads a run's R + K - 1 inputs at once. This repeats those loops step for
step (the same index arithmetic, the same run ownership, vectorized over channels
only) and checks them, by brute force over small problems with runs shorter than
the sequence, against a direct sum, with segments and states. A run that stored an
input twice or never, or read an input it should not, fails here without a GPU.
Run: python3 tests/cuda/conv1d_window_model.py
"""

import itertools

import numpy as np


class Row:
  def __init__(self, x, state, seg):
    self.x, self.state, self.seg = x, state, seg
    self.length, self.state_len = x.shape[0], 0 if state is None else state.shape[0]

  def input(self, pos):
    if 0 <= pos < self.length:
      return self.x[pos]
    if -self.state_len <= pos < 0:
      return self.state[self.state_len + pos]
    return np.zeros(self.x.shape[1])

  def seg_at(self, pos):
    if self.seg is None:
      return 0
    return self.seg[min(max(pos, 0), self.length - 1)]


def fwd_window(row, w, b, lo, run_len, kt, u_ahead):
  y = np.full(row.x.shape, np.nan)
  for run in range((row.length + run_len - 1) // run_len):
    t0 = run * run_len
    t1 = min(t0 + run_len, row.length)
    win = [row.input(t0 - lo + k) for k in range(kt - 1)] + [None] * u_ahead
    sw = [row.seg_at(t0 - lo + k) for k in range(kt - 1)] + [None] * u_ahead
    for t in range(t0, t1, u_ahead):
      sout = []
      for u in range(u_ahead):
        pos = t - lo + kt - 1 + u
        win[kt - 1 + u] = row.input(pos) if t + u < t1 else np.zeros(row.x.shape[1])
        sw[kt - 1 + u] = row.seg_at(pos)
        sout.append(row.seg_at(t + u))
      for u in range(u_ahead):
        if t + u < t1:
          acc = b.copy()
          for k in range(kt):
            if sw[u + k] == sout[u]:
              acc += w[k] * win[u + k]
          assert np.isnan(y[t + u]).all(), "output stored twice"
          y[t + u] = acc
      win[:kt - 1], sw[:kt - 1] = win[u_ahead:u_ahead + kt - 1], sw[u_ahead:u_ahead + kt - 1]
  return y


def fwd_plain(row, w, b, lo, run_len, kt):
  assert row.seg is None and row.state_len == 0
  y = np.full(row.x.shape, np.nan)
  for run in range((row.length + run_len - 1) // run_len):
    t0 = run * run_len
    win = []
    for j in range(run_len + kt - 1):
      pos = t0 - lo + j
      win.append(row.x[pos] if 0 <= pos < row.length else np.zeros(row.x.shape[1]))
    for r in range(run_len):
      if t0 + r < row.length:
        assert np.isnan(y[t0 + r]).all(), "output stored twice"
        y[t0 + r] = b + sum(w[k] * win[r + k] for k in range(kt))
  return y


def bwd_window(row, w, dy, lo, chunk, kt, u_ahead, warps):
  """dx, dstate and the per-chunk partials for activation None (dz = dy); each chunk
  is walked by `warps` sub-runs of ceil(chunk / warps) positions, as the warps of
  one block, whose partials are summed in warp order."""
  length, c = row.x.shape
  dx = np.full((length, c), np.nan)
  dstate = np.full((row.state_len, c), np.nan)
  chunks = (length + chunk - 1) // chunk
  dw_part, db_part = np.zeros((chunks, kt, c)), np.zeros((chunks, c))
  sub = (chunk + warps - 1) // warps
  for j in range(chunks):
    c_lo, c_hi = j * chunk, min((j + 1) * chunk, length)
    dw_warp, db_warp = np.zeros((warps, kt, c)), np.zeros((warps, c))
    for y in range(warps):
      i0 = min(c_lo + y * sub, c_hi)
      i1 = min(i0 + sub, c_hi)
      first = -row.state_len if j == 0 and y == 0 else i0
      t_begin, t_end = i0 + lo - (kt - 1), i1 + lo
      dxacc = [np.zeros(c) for _ in range(kt)]
      win = [row.input(t_begin - lo + k) for k in range(kt - 1)] + [None] * u_ahead
      sw = [row.seg_at(t_begin - lo + k) for k in range(kt - 1)] + [None] * u_ahead
      for t in range(t_begin, t_end, u_ahead):
        g, sout = [], []
        for u in range(u_ahead):
          pos = t - lo + kt - 1 + u
          win[kt - 1 + u] = row.input(pos)
          sw[kt - 1 + u] = row.seg_at(pos)
          tt = t + u
          g.append(dy[tt] if 0 <= tt < length and tt < t_end else np.zeros(c))
          sout.append(row.seg_at(tt))
        for u in range(u_ahead):
          tt = t + u
          if tt >= t_end:
            continue
          mask = [sw[u + k] == sout[u] for k in range(kt)]
          dz = g[u]
          if i0 <= tt < i1:
            db_warp[y] += dz
            for k in range(kt):
              if mask[k]:
                dw_warp[y, k] += dz * win[u + k]
          for k in range(kt):
            if mask[k]:
              dxacc[k] = dxacc[k] + w[k] * dz
          e = tt - lo
          if first <= e < i1:
            target = dx if e >= 0 else dstate
            idx = e if e >= 0 else row.state_len + e
            assert np.isnan(target[idx]).all(), f"input {e} stored twice"
            target[idx] = dxacc[0]
          dxacc = dxacc[1:] + [np.zeros(c)]
        win[:kt - 1], sw[:kt - 1] = win[u_ahead:u_ahead + kt - 1], sw[u_ahead:u_ahead + kt - 1]
    for y in range(warps):
      dw_part[j] += dw_warp[y]
      db_part[j] += db_warp[y]
  return dx, dstate, dw_part.sum(0), db_part.sum(0)


def direct(row, w, b, lo, dy):
  """y, dx, dstate, dw, db by the definition: output t reads input t - lo + k."""
  length, c = row.x.shape
  kt = w.shape[0]
  y = np.tile(b, (length, 1))
  dx, dstate = np.zeros((length, c)), np.zeros((row.state_len, c))
  dw, db = np.zeros((kt, c)), dy.sum(0)
  for t in range(length):
    for k in range(kt):
      pos = t - lo + k
      if row.seg_at(pos) != row.seg_at(t):
        continue
      y[t] += w[k] * row.input(pos)
      dw[k] += dy[t] * row.input(pos)
      if 0 <= pos < length:
        dx[pos] += w[k] * dy[t]
      elif -row.state_len <= pos < 0:
        dstate[row.state_len + pos] += w[k] * dy[t]
  return y, dx, dstate, dw, db


def main():
  rng = np.random.default_rng(0)
  checked = 0
  for kt, length, run_len, u_ahead, with_state, with_seg in itertools.product(
      (2, 3, 4), (1, 2, 3, 5, 9, 17), (1, 2, 3, 4, 8), (1, 3, 4, 8), (False, True), (False, True)):
    for lo in ([kt - 1] if with_state else range(kt)):
      c = 3
      x = rng.standard_normal((length, c))
      state = rng.standard_normal((kt - 1, c)) if with_state else None
      seg = np.cumsum(rng.random(length) < 0.3) if with_seg else None
      row = Row(x, state, seg)
      w, b, dy = rng.standard_normal((kt, c)), rng.standard_normal(c), rng.standard_normal((length, c))
      y_ref, dx_ref, ds_ref, dw_ref, db_ref = direct(row, w, b, lo, dy)
      y = fwd_window(row, w, b, lo, run_len, kt, u_ahead)
      if not (with_state or with_seg):
        assert np.allclose(fwd_plain(row, w, b, lo, run_len, kt), y_ref, atol=1e-9), f"plain y differs: K={kt} L={length} run={run_len} lo={lo}"
      warps = 1 + checked % 4  # 1-4 sub-runs a chunk: also ones that do not divide it
      dx, ds, dw, db = bwd_window(row, w, dy, lo, run_len, kt, u_ahead, warps)
      what = (f"K={kt} L={length} run={run_len} U={u_ahead} warps={warps} lo={lo} state={with_state} "
              f"seg={with_seg}")
      for name, got, ref in (("y", y, y_ref), ("dx", dx, dx_ref), ("dstate", ds, ds_ref), ("dw", dw, dw_ref),
                             ("db", db, db_ref)):
        assert np.allclose(got, ref, atol=1e-9), f"{name} differs: {what}"
      checked += 1
  print(f"window kernels' loops agree with the direct sums on {checked} problems")


if __name__ == "__main__":
  main()
