"""A Python model of the tensor-core filter gradient's indexing, for debugging it.

It follows dwconv_bwd_filter_mma_kernel and its host grid (csrc/
bwd_filter/mma.cuh, bwd_filter/mma.cu) line by line: the same shared-memory
offsets, ring slots, fragment words and output indices, with a 32-bit word modelled
as a (low half, high half) pair and shared memory starting as NaN, so that a read of
anything never staged fails. Each MMA is rebuilt from the 32 lanes' registers in the
PTX m16n8k16 layout. It checks dw against a direct sum, in float64.

  python3 tests/cuda/bwd_filter_mma_model.py

It is not a test of the CUDA code: keep it in step with the kernel when either changes.
"""
import itertools

import numpy as np


def ceil_div(a, b):
  return (a + b - 1) // b


def round_up_mod32(at_least, residue):
  return at_least + ((residue - at_least) % 32 + 32) % 32


def make_grid(p, slices, max_smem=227 * 1024):
  g = {}
  g["m_tiles"] = ceil_div(p["KW"], 16)
  n_total = ceil_div(p["KH"], 8)
  g["k_tiles"] = ceil_div(p["Wo"], 16)
  g["x_words"] = round_up_mod32(8 * (g["k_tiles"] + g["m_tiles"]), 16)
  g["dy_words"] = round_up_mod32(8 * g["k_tiles"], 4)
  g["stage_rows"] = max(1, min(16 // g["k_tiles"], 8))
  g["n_per_group"] = max(1, min(4 // g["m_tiles"], n_total))
  while True:
    g["ring_rows"] = 8 * g["n_per_group"] + g["stage_rows"] - 1
    g["dy_offset"] = g["stage_rows"] * 8 * 2 * g["x_words"] * 4
    smem = g["dy_offset"] + (8 * g["ring_rows"] + 1) * g["dy_words"] * 4  # + the zero row
    if smem <= max_smem or (g["n_per_group"] == 1 and g["stage_rows"] == 1):
      break
    if g["n_per_group"] > 1:
      g["n_per_group"] //= 2
    else:
      g["stage_rows"] = 1
  g["groups"] = ceil_div(n_total, g["n_per_group"])
  g["rows"] = p["N"] * p["H"]
  if slices > 0:
    g["rows_per_split"] = ceil_div(g["rows"], slices); g["atomic"] = False; chunks = slices
  else:
    blocks_xy = g["groups"] * ceil_div(p["C"], 8)
    splits = ceil_div(2048, blocks_xy)
    splits = min(splits, ceil_div(g["rows"], 2 * g["ring_rows"]))
    splits = max(1, min(splits, 65535))
    g["rows_per_split"] = ceil_div(g["rows"], splits); g["atomic"] = True
    chunks = ceil_div(g["rows"], g["rows_per_split"])
  return g, chunks

def ring_slot(oh, R):
  s = int(np.fmod(oh, R))  # C++ % truncates toward zero
  return s + R if s < 0 else s

def kernel_block(p, g, x, dy, ws, bx, by, bz):
  C, KH, KW, H, W, Ho, Wo = p["C"], p["KH"], p["KW"], p["H"], p["W"], p["Ho"], p["Wo"]
  cols_x = 2 * g["x_words"]; cols_dy = 2 * g["dy_words"]; R = g["ring_rows"]
  slot_x = 8 * 2 * cols_x                    # halves of one input-row slot
  xs = np.full(g["stage_rows"] * slot_x, np.nan)  # halves; NaN = never staged
  ds = np.full(8 * R * cols_dy, np.nan)
  ring_tag = {}  # ring slot -> the dy row it holds
  channel_base = by * 8
  kh_begin = bx * g["n_per_group"] * 8
  kh_end = min(kh_begin + 8 * g["n_per_group"], KH)
  tiles = g["m_tiles"] * g["n_per_group"]  # v2: the template tile grid; rows past kh_end read zeros
  acc = np.zeros((4, 2, 4, 32, 4))  # warp, channel, tile, lane, i
  frags = {}  # (warp, channel, tile, kb) -> lane -> (A words, B word 0, B word 1)
  row_begin = bz * g["rows_per_split"]; row_end = min(row_begin + g["rows_per_split"], g["rows"])
  def px(n, ih, iw, k):
    c = channel_base + k
    return x[n, ih, iw, c] if c < C else 0.0
  def pdy(n, oh, ow, k):
    c = channel_base + k
    return dy[n, oh, ow, c] if c < C else 0.0
  row0 = row_begin
  while row0 < row_end:
    n, ih0 = divmod(row0, H)
    count = min(g["stage_rows"], row_end - row0, H - ih0)
    oh_top = ih0 + count - 1 + p["pt"] - kh_begin
    oh_first = ih0 + p["pt"] - kh_end + 1 if (row0 == row_begin or ih0 == 0) else oh_top - count + 1
    # a new stage: the previous stage's slots are dead; mark them unstaged to catch stale reads
    xs[:] = np.nan
    # stage_x_rows: word w (< used_x) of copy 0 holds columns 2w, 2w + 1 (less pad_left),
    # of copy 1 columns 2w + 1, 2w + 2; words past used_x stay NaN
    used_x = 8 * (g["k_tiles"] + g["m_tiles"])
    for r, w in itertools.product(range(count), range(used_x)):
      ih = ih0 + r
      for k in range(8):
        def col(iw):
          ok = 0 <= ih < H and 0 <= iw < W
          return px(n, ih, iw, k) if ok else 0.0
        base = r * slot_x + k * 2 * cols_x
        xs[base + 2 * w] = col(2 * w - p["pl"])
        xs[base + 2 * w + 1] = col(2 * w + 1 - p["pl"])
        xs[base + cols_x + 2 * w] = col(2 * w + 1 - p["pl"])
        xs[base + cols_x + 2 * w + 1] = col(2 * w + 2 - p["pl"])
    # stage_dy_rows: words < used_dy (columns 2w, 2w + 1) of the entering rows
    used_dy = 8 * g["k_tiles"]
    for oh in range(oh_first, oh_top + 1):
      ok_row = 0 <= oh < Ho
      slot = ring_slot(oh, R)
      ring_tag[slot] = oh
      for k in range(8):  # the slot's old row is dead: unstaged words must not be read
        ds[k * R * cols_dy + slot * cols_dy:k * R * cols_dy + (slot + 1) * cols_dy] = np.nan
      for j in range(2 * used_dy):
        ok = ok_row and j < Wo
        for k in range(8):
          ds[k * R * cols_dy + slot * cols_dy + j] = pdy(n, oh, j, k) if ok else 0.0
    row0 += count
    word = lambda arr, w: (arr[2 * w], arr[2 * w + 1])
    for r in range(count):
      ih = ih0 + r
      for warp in range(4):
        for lane in range(32):
          gid, tig = lane // 4, lane % 4
          parity = gid & 1
          a_off, b_off, b_ok = [], [], []
          for t in range(4):
            m, nt = t % g["m_tiles"], t // g["m_tiles"]
            kh = kh_begin + 8 * nt + gid
            a_off.append(r * (slot_x // 2) + parity * g["x_words"] + ((16 * m + gid + 2 * tig) >> 1))
            slot = ring_slot(ih + p["pt"] - kh, R)
            if kh < kh_end:
              assert ring_tag[slot] == ih + p["pt"] - kh, ("stale dy ring row", ih, kh, slot, ring_tag[slot])
            b_off.append(slot * g["dy_words"] + tig)
            b_ok.append(kh < kh_end)
          # store fragments per (kb, c, t) for this lane
          for kb in range(g["k_tiles"]):
            for c in range(2):
              channel = warp * 2 + c
              xw = 2 * channel * g["x_words"] + 8 * kb
              dwb = channel * R * g["dy_words"] + 8 * kb
              for t in range(4):
                if t >= tiles: break
                aw = xw + a_off[t]
                a = [word(xs, aw), word(xs, aw + 4), word(xs, aw + 4), word(xs, aw + 8)]
                b0 = word(ds, dwb + b_off[t]) if b_ok[t] else (0.0, 0.0)
                b1 = word(ds, dwb + b_off[t] + 4) if b_ok[t] else (0.0, 0.0)
                frags.setdefault((warp, c, t, kb), {})[lane] = (a, b0, b1)
      # run the MMAs: rebuild A (16x16), B (16x8) from the 32 lanes' registers
      for (warp, c, t, kb), lanes in frags.items():
        A = np.zeros((16, 16)); B = np.zeros((16, 8))
        for lane, (a, b0, b1) in lanes.items():
          gid, tig = lane // 4, lane % 4
          A[gid, 2*tig], A[gid, 2*tig+1] = a[0]; A[gid+8, 2*tig], A[gid+8, 2*tig+1] = a[1]
          A[gid, 2*tig+8], A[gid, 2*tig+9] = a[2]; A[gid+8, 2*tig+8], A[gid+8, 2*tig+9] = a[3]
          B[2*tig, gid], B[2*tig+1, gid] = b0; B[2*tig+8, gid], B[2*tig+9, gid] = b1
        assert not np.isnan(A).any() and not np.isnan(B).any(), ("unstaged read", warp, c, t, kb)
        D = A @ B
        for lane in range(32):
          gid, tig = lane // 4, lane % 4
          acc[warp, c, t, lane] += [D[gid, 2*tig], D[gid, 2*tig+1], D[gid+8, 2*tig], D[gid+8, 2*tig+1]]
      frags.clear()
  slice_ = 0 if g["atomic"] else bz * KH * KW * C
  for warp, c, t, lane in itertools.product(range(4), range(2), range(4), range(32)):
    channel = channel_base + warp * 2 + c
    if channel >= C or t >= tiles: continue
    gid, tig = lane // 4, lane % 4
    m, nt = t % g["m_tiles"], t // g["m_tiles"]
    for i in range(4):
      kw = 16 * m + gid + (8 if i >= 2 else 0)
      kh = kh_begin + 8 * nt + 2 * tig + (i & 1)
      if kw >= KW or kh >= kh_end: continue
      idx = slice_ + (kh * KW + kw) * C + channel
      if g["atomic"]: ws[idx] += acc[warp, c, t, lane, i]
      else: ws[idx] = acc[warp, c, t, lane, i]

def run(N, H, W, C, KH, KW, pt, pb, pl, pr, slices):
  rng = np.random.default_rng(1)
  Ho, Wo = H + pt + pb - KH + 1, W + pl + pr - KW + 1
  p = dict(N=N, H=H, W=W, C=C, KH=KH, KW=KW, Ho=Ho, Wo=Wo, pt=pt, pl=pl)
  x = rng.uniform(-1, 1, (N, H, W, C)); dy = rng.uniform(-1, 1, (N, Ho, Wo, C))
  g, chunks = make_grid(p, slices)
  nslices = 1 if g["atomic"] else chunks
  ws = np.full(nslices * KH * KW * C, np.nan) if not g["atomic"] else np.zeros(KH * KW * C)
  for bx in range(g["groups"]):
    for by in range(ceil_div(C, 8)):
      for bz in range(chunks):
        kernel_block(p, g, x, dy, ws, bx, by, bz)
  assert not np.isnan(ws).any(), "workspace element never written"
  dw = ws.reshape(nslices, KH, KW, C).sum(0)
  ref = np.zeros((KH, KW, C))
  for kh, kw in itertools.product(range(KH), range(KW)):
    for oh in range(Ho):
      ih = oh + kh - pt
      if not 0 <= ih < H: continue
      for ow in range(Wo):
        iw = ow + kw - pl
        if 0 <= iw < W: ref[kh, kw] += (dy[:, oh, ow] * x[:, ih, iw]).sum(0)
  err = np.abs(dw - ref).max()
  print(f"N{N} H{H} W{W} C{C} k{KH}x{KW} pad({pt},{pb},{pl},{pr}) slices={slices} groups={g['groups']} "
     f"m_tiles={g['m_tiles']} n/group={g['n_per_group']} chunks={chunks}: max err {err:.2e}")
  return err

cases = [
  (1, 7, 9, 1, 3, 3, 1, 1, 1, 1, 0),        # c1_k3: one channel, scalar
  (2, 14, 14, 10, 7, 7, 3, 3, 3, 3, 0),      # convnext-like, ragged channel block
  (1, 9, 9, 3, 7, 7, 0, 6, 5, 1, 0),         # asym_k7
  (1, 6, 7, 3, 3, 3, 5, 5, 5, 5, 3),         # padding wider than the filter (Ho > H), deterministic
  (1, 12, 20, 2, 5, 17, 2, 2, 8, 8, 0),      # 2 M tiles
  (1, 20, 12, 2, 17, 5, 8, 8, 2, 2, 2),      # KH 17: 3 N tiles, groups; deterministic
  (2, 5, 21, 2, 9, 9, 4, 4, 4, 4, 7),        # rows shorter than the ring, chunk starts mid-image
  (1, 3, 3, 2, 3, 3, 1, 1, 1, 1, 40),        # more slices than rows
  (1, 20, 20, 1, 19, 19, 9, 9, 9, 9, 0),     # 2 M tiles, 2 groups, the last with one real N tile
  (1, 12, 20, 1, 9, 51, 4, 4, 25, 25, 2),    # 4 M tiles
  (1, 10, 40, 3, 17, 33, 8, 8, 16, 16, 0),   # 3 M tiles, 3 groups
  (3, 11, 32, 3, 9, 9, 4, 4, 4, 4, 0),       # 8-row stages across 3 images (11 rows: 8 + 3)
  (2, 13, 30, 2, 9, 9, 4, 4, 4, 4, 5),       # stages cut by chunk ends, deterministic
  (2, 9, 64, 2, 13, 13, 6, 6, 6, 6, 0),      # 4-row stages, 2 N tiles
  (1, 20, 12, 2, 17, 5, 8, 8, 2, 2, 3),      # KH 17, 8-row stages, deterministic
]

if __name__ == "__main__":
  print("worst", max(run(*c) for c in cases))
