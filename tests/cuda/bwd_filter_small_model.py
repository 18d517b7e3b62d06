"""A step-by-step model of the small-filter filter-gradient kernel's indexing
(csrc/bwd_filter/small.cuh, its grid in bwd_filter/small_grid.h and launch in
bwd_filter/launch.cuh), in numpy, checked against a direct sum on random problems:
3x3 and 5x5, stride 1 and 2, symmetric, one-sided, negative and large padding, maps
narrower than the filter, channel counts that leave groups and columns idle.

Each pipeline stage carries the step it holds and the commit group of its copies, so
a read of a stage that a later copy overwrote, or one the wait did not cover, fails;
each ring slot carries the (image, dy row) it holds, and every multiply is checked to
pair an input row and a dy row of the same image through the right filter row. Every
copy that reads global memory is checked to be inside x or dy.

  python tests/cuda/bwd_filter_small_model.py
"""

import itertools

import numpy as np

THREADS, MAX_GROUPS, MIN_RUN = 128, 32, 8


def width_of(half, k):
  return 8 if half and k == 3 else 4


def stages_of(copy_bytes):
  return 4 if copy_bytes == 16 else 6


def ring_of(k, s):
  return -(-k // s)


def direct(x, dy, k, s, pad_top, pad_left):
  n, h, w, c = x.shape
  _, ho, wo, _ = dy.shape
  dw = np.zeros((k, k, c))
  for i in range(k):
    for j in range(k):
      for oh in range(ho):
        ih = s * oh + i - pad_top
        if not 0 <= ih < h:
          continue
        for ow in range(wo):
          iw = s * ow + j - pad_left
          if 0 <= iw < w:
            dw[i, j] += np.einsum("nc,nc->c", dy[:, oh, ow], x[:, ih, iw])
  return dw


def make_grid(n, out_h, out_w, c, k, s, width, elem_bytes, resident):
  """make_bwd_filter_small_grid."""
  all_groups = max(-(-c // width), 1)
  ow_ = max(out_w, 1)
  best, groups = None, 1
  for g in range(1, min(all_groups, MAX_GROUPS) + 1):
    cols = min(THREADS // g, ow_)
    blocks = -(-all_groups // g) * -(-ow_ // cols)
    if best is None or blocks <= best:
      best, groups = blocks, g
  channel_blocks = -(-all_groups // groups)
  most_cols = min(THREADS // groups, ow_)
  col_blocks = -(-ow_ // most_cols)
  cols = -(-ow_ // col_blocks)
  x_cols = s * (cols - 1) + k
  ring = ring_of(k, s)
  image_steps = out_h + ring - 1
  sequence_steps = n * image_steps
  runs = max(resident // (channel_blocks * col_blocks), 1)
  runs = min(runs, max(sequence_steps // MIN_RUN, 1))
  steps_per_run = max(-(-sequence_steps // runs), 1)
  runs = -(-sequence_steps // steps_per_run)
  stage_elems = (cols + s * x_cols) * groups * width
  partial_bytes = k * k * cols * groups * width * 4
  smem = max(stages_of(width * elem_bytes) * stage_elems * elem_bytes, partial_bytes)
  assert groups * cols <= THREADS
  return dict(groups=groups, cols=cols, x_cols=x_cols, channel_blocks=channel_blocks, col_blocks=col_blocks,
              image_steps=image_steps, sequence_steps=sequence_steps, steps_per_run=steps_per_run, runs=runs,
              stage_elems=stage_elems, smem=smem)


def x_passes(k, s):
  return (s * (s * THREADS + (k - s) * MAX_GROUPS) + THREADS - 1) // THREADS


def model(x, dy, k, s, pad_top, pad_left, half, resident):
  n, in_h, in_w, c = x.shape
  _, out_h, out_w, _ = dy.shape
  width = width_of(half, k)
  assert c % width == 0
  g = make_grid(n, out_h, out_w, c, k, s, width, 2 if half else 4, resident)
  ring_n, stages = ring_of(k, s), stages_of(width * (2 if half else 4))
  groups, cols, x_cols = g["groups"], g["cols"], g["x_cols"]
  x_flat, dy_flat = x.reshape(-1), dy.reshape(-1)
  ws = np.zeros((k * k, c))
  group_elems = groups * width
  x_row_elems = x_cols * groups
  passes = x_passes(k, s)
  assert s * x_row_elems <= passes * THREADS, "the copy passes cover the stage's x rows"
  blocks = g["runs"] * g["col_blocks"] * g["channel_blocks"]
  for b in range(blocks):
    channel_block = b % g["channel_blocks"]
    spatial = b // g["channel_blocks"]
    col_block, run = spatial % g["col_blocks"], spatial // g["col_blocks"]
    channel_base = channel_block * group_elems
    ow_begin = col_block * cols
    iw_begin = s * ow_begin - pad_left
    step_begin = run * g["steps_per_run"]
    owned = min(step_begin + g["steps_per_run"], g["sequence_steps"]) - step_begin
    steps = min(owned + ring_n - 1, g["sequence_steps"] - step_begin)
    # Per-thread copy offsets (kernel: dy_offset, x_offset[pass], x_row_bits).
    dy_offset = [-1] * THREADS
    for t in range(min(cols * groups, THREADS)):
      ow, ch = ow_begin + t // groups, channel_base + (t % groups) * width
      if ow < out_w and ch < c:
        dy_offset[t] = ow * c + ch
    x_offset = np.full((THREADS, passes), -1)
    x_second = np.zeros((THREADS, passes), bool)
    for t in range(THREADS):
      for p_ in range(passes):
        e = t + p_ * THREADS
        if e < s * x_row_elems:
          r, rest = divmod(e, x_row_elems)
          iw, ch = iw_begin + rest // groups, channel_base + (rest % groups) * width
          if 0 <= iw < in_w and ch < c:
            x_offset[t, p_] = iw * c + ch
          x_second[t, p_] = r == 1
    # Stage memory: values and, per element, the (step, commit group) that wrote it.
    smem = np.full((stages, g["stage_elems"]), np.nan)
    tag = np.full((stages, g["stage_elems"] // width), -1)
    group_of = np.full(stages, -1)  # commit group of the stage's copies
    state = dict(step=0, slot=0, image=step_begin // g["image_steps"], m=step_begin % g["image_steps"], group=0)

    def copy_next():
      st = state
      if st["step"] < steps:
        stage = st["slot"]
        dy_row = st["step"] < owned and st["m"] < out_h
        for t in range(min(cols * groups, THREADS)):
          valid = dy_row and dy_offset[t] >= 0
          dst = slice(t * width, (t + 1) * width)
          if valid:
            src = (st["image"] * out_h + st["m"]) * out_w * c + dy_offset[t]
            assert 0 <= src and src + width <= dy_flat.size, "dy copy inside dy"
            smem[stage, dst] = dy_flat[src:src + width]
          else:
            smem[stage, dst] = 0
          tag[stage, t] = st["step"]
        ih0 = s * st["m"] - pad_top
        base = cols * groups
        for t in range(THREADS):
          for p_ in range(passes):
            e = t + p_ * THREADS
            if e >= s * x_row_elems:
              continue
            ih = ih0 + (1 if x_second[t, p_] else 0)
            valid = x_offset[t, p_] >= 0 and 0 <= ih < in_h
            dst = slice((base + e) * width, (base + e + 1) * width)
            if valid:
              src = (st["image"] * in_h + ih) * in_w * c + x_offset[t, p_]
              assert 0 <= src and src + width <= x_flat.size, "x copy inside x"
              smem[stage, dst] = x_flat[src:src + width]
            else:
              smem[stage, dst] = 0
            tag[stage, base + e] = st["step"]
        group_of[stage] = st["group"]
      st["step"] += 1
      st["slot"] = (st["slot"] + 1) % stages
      st["m"] += 1
      if st["m"] == g["image_steps"]:
        st["m"], st["image"] = 0, st["image"] + 1

    def commit():
      state["group"] += 1

    for _ in range(stages - 1):
      copy_next()
      commit()
    acc = np.zeros((THREADS, k, k, width))
    ring = np.zeros((THREADS, ring_n, width))
    ring_tag = [[None] * ring_n for _ in range(THREADS)]
    m = step_begin % g["image_steps"]
    image = step_begin // g["image_steps"]
    counts, slot = 0, 0
    for l in range(steps):
      u = l % ring_n
      completed = state["group"] - (stages - 2)  # groups < completed are done
      barrier_slot = slot
      copy_next()  # after the barrier: must not touch the stage read now
      assert group_of[barrier_slot] < completed, "step's copies waited for"
      commit()
      real = l < owned and m < out_h
      counts = ((counts << 1) | int(real)) & ((1 << ring_n) - 1)
      cur_m, cur_image = m, image
      m += 1
      if m == g["image_steps"]:
        m, image = 0, image + 1
      stage = barrier_slot
      slot = (slot + 1) % stages
      for t in range(min(cols * groups, THREADS)):
        if dy_offset[t] < 0 or counts == 0:
          continue
        grp, col = t % groups, t // groups
        if real:
          dread = (col * groups + grp)
          assert tag[stage, dread] == l, "dy read of this step"
          ring[t, u] = smem[stage, dread * width:(dread + 1) * width]
          ring_tag[t][u] = (cur_image, cur_m)
        xread = s * col * groups + grp
        for r in range(s):
          for kw in range(k):
            e = cols * groups + r * x_row_elems + kw * groups + xread
            assert tag[stage, e] == l, "x read of this step"
            xv = smem[stage, e * width:(e + 1) * width]
            for j in range(ring_n):
              kh = r + s * j
              if kh >= k or not counts >> j & 1:
                continue
              sl = (u + ring_n - j) % ring_n
              img, dym = ring_tag[t][sl]
              assert img == cur_image and s * dym + kh == s * cur_m + r, "a pair of one image, through kh"
              acc[t, kh, kw] += xv * ring[t, sl]
    # Partials in column order, one atomic add per tap and channel.
    cols_inside = min(cols, out_w - ow_begin)
    for tap in range(k * k):
      for ch in range(group_elems):
        if channel_base + ch >= c:
          continue
        grp, i = divmod(ch, width)
        total = 0.0
        for col in range(cols_inside):
          t = col * groups + grp
          total += acc[t, tap // k, tap % k, i]
        ws[tap, channel_base + ch] += total
  return ws.reshape(k, k, c), g


def main():
  rng = np.random.default_rng(46)
  cases = 0
  shapes = [
      # n, h, w, c, k, s, pad_top, pad_left, half, resident
      (2, 7, 7, 16, 3, 1, 1, 1, True, 264),
      (3, 5, 9, 8, 3, 2, 1, 1, True, 100),
      (2, 6, 6, 24, 3, 2, 0, 0, True, 396),   # SAME stride 2 on an even map: pad 0 before
      (1, 4, 3, 12, 5, 1, 2, 2, True, 50),    # W below the filter
      (2, 9, 8, 20, 5, 2, 1, 2, True, 396),
      (2, 6, 5, 12, 3, 1, 0, 2, False, 8),    # one-sided padding
      (2, 8, 7, 4, 5, 2, 2, 2, False, 396),
      (3, 5, 5, 36, 3, 1, -1, 1, False, 1),   # cropping before (negative padding), one run
      (1, 30, 3, 8, 3, 1, 1, 1, True, 264),   # tall: runs inside one image
      (2, 3, 40, 8, 3, 1, 1, 1, True, 264),   # wide: several column blocks
      (2, 4, 4, 288, 3, 1, 1, 1, True, 264),  # 36 groups: two channel blocks, the second partly idle
      (2, 4, 4, 140, 5, 1, 3, 0, False, 264), # large padding, 35 groups
  ]
  for n, h, w, c, k, s, pt, pl, half, resident in shapes:
    pad_bottom = int(rng.integers(-1, 3)) if pt >= 0 else 0
    pad_right = int(rng.integers(0, 3))
    out_h = (h + pt + pad_bottom - k) // s + 1
    out_w = (w + pl + pad_right - k) // s + 1
    if out_h <= 0 or out_w <= 0:
      out_h, out_w = max(out_h, 1), max(out_w, 1)
    x = rng.standard_normal((n, h, w, c))
    dy = rng.standard_normal((n, out_h, out_w, c))
    got, g = model(x, dy, k, s, pt, pl, half, resident)
    want = direct(x, dy, k, s, pt, pl)
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)
    assert err < 1e-12, (n, h, w, c, k, s, pt, pl, err)
    cases += 1
    print(f"{n}x{h}x{w}x{c} k{k} s{s} pad ({pt},{pl}) out {out_h}x{out_w} half={half}: groups {g['groups']} "
          f"cols {g['cols']} runs {g['runs']} x {g['steps_per_run']} steps, rel err {err:.1e}")
  # Random problems.
  for _ in range(40):
    k, s, half = int(rng.choice([3, 5])), int(rng.integers(1, 3)), bool(rng.integers(0, 2))
    width = width_of(half, k)
    n, h, w = int(rng.integers(1, 4)), int(rng.integers(1, 12)), int(rng.integers(1, 12))
    c = width * int(rng.integers(1, 12))
    pt, pl = int(rng.integers(-1, k)), int(rng.integers(-1, k))
    pb, pr = int(rng.integers(0, k)), int(rng.integers(0, k))
    out_h, out_w = (h + pt + pb - k) // s + 1, (w + pl + pr - k) // s + 1
    if out_h <= 0 or out_w <= 0:
      continue
    x = rng.standard_normal((n, h, w, c))
    dy = rng.standard_normal((n, out_h, out_w, c))
    got, _ = model(x, dy, k, s, pt, pl, half, int(rng.choice([1, 7, 64, 396])))
    want = direct(x, dy, k, s, pt, pl)
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)
    assert err < 1e-12, (n, h, w, c, k, s, pt, pl, err)
    cases += 1
  # GPU test problems on the grid an H100 gives them (132 SMs x 3 blocks), with their
  # own padding (pad_top, pad_bottom), (pad_left, pad_right) and the grid pinned, so
  # that a change of the split shows here rather than passing on another grid.
  exact = [
      # tests/shapes.py rows_k3_c64 in fp16/bf16 (SAME): 8 groups x 14 columns in 5
      # column blocks, 10 runs of 9 steps, the fifth across the image boundary
      # (image 0's dy rows 36-39, its 2 finishing steps, image 1's rows 0-2).
      (2, 40, 70, 64, 3, 1, (1, 1), (1, 1), True, 396,
       dict(groups=8, cols=14, channel_blocks=1, col_blocks=5, runs=10, steps_per_run=9)),
  ]
  for n, h, w, c, k, s, (pt, pb), (pl, pr), half, resident, grid in exact:
    out_h, out_w = (h + pt + pb - k) // s + 1, (w + pl + pr - k) // s + 1
    x = rng.standard_normal((n, h, w, c))
    dy = rng.standard_normal((n, out_h, out_w, c))
    got, g = model(x, dy, k, s, pt, pl, half, resident)
    assert {key: g[key] for key in grid} == grid, (n, h, w, c, k, s, g)
    want = direct(x, dy, k, s, pt, pl)
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)
    assert err < 1e-12, (n, h, w, c, k, s, pt, pl, err)
    cases += 1
    print(f"{n}x{h}x{w}x{c} k{k} s{s} out {out_h}x{out_w} half={half} (GPU test grid): groups {g['groups']} "
          f"cols {g['cols']} x {g['col_blocks']} blocks, runs {g['runs']} x {g['steps_per_run']} steps, "
          f"rel err {err:.1e}")
  print(f"{cases} problems match the direct sum")
  # The registry's grids on an H100 (132 SMs, 3 blocks each).
  for n, h, c, k, s in [(64, 112, 32, 3, 1), (64, 56, 144, 3, 1), (64, 28, 192, 3, 1), (64, 14, 384, 3, 1),
                        (64, 28, 240, 5, 1), (64, 14, 480, 5, 1), (64, 112, 96, 3, 2), (64, 7, 960, 3, 1)]:
    ho = -(-h // s)
    g = make_grid(n, ho, ho, c, k, s, width_of(True, k), 2, 396)
    print(f"{n}x{h}x{h}x{c} {k}x{k} s{s}: groups {g['groups']} x cols {g['cols']}, {g['channel_blocks']} x "
          f"{g['col_blocks']} blocks a row, {g['runs']} runs of {g['steps_per_run']} steps, "
          f"{g['runs'] * g['channel_blocks'] * g['col_blocks']} blocks, smem {g['smem']} B")


if __name__ == "__main__":
  main()
