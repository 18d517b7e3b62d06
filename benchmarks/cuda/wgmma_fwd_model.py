"""CPU model of the Hopper forward's index mapping (csrc/fwd/wgmma.cuh), checked against a
direct convolution: the only check of that kernel's layouts short of a Hopper GPU.

It follows the kernel step by step on shared memory modelled as byte arrays:
  - to_planar: x (N, H, W, C) -> xt[c][n][h][Wpad], element (h, w) at column pw + w;
  - the B bricks, built word by word as the kernel's loop does, and the zero bricks;
  - the staging ring: cp.async of 16-byte chunks per (unit, chunk) thread in the
    kernel's cursor order, each landing at issue (the earliest it can, so a slot
    reused too soon would be caught), zero-filled for units past the batch;
  - ldmatrix.x4: lane addresses from a_off, registers from the rows those lanes give;
  - wgmma: A rebuilt from the per-warp register fragments (m16n8k16 A layout for rows
    16w..16w + 15), B read through the descriptor's fields (start, LBO = K-direction
    core-matrix stride, SBO = N-direction stride, no swizzle), D into the accumulator
    fragment (d[4j + e] = D[16w + g + 8(e/2)][8j + 2tig + e%2]);
  - store_tile's lane formula into yt, then from_planar back to NHWC;
  - separately, the two transpose kernels' loops (16-byte vectors on the global side,
    a [64][tp] shared tile), checked against the array-level transposes above.
Inputs are bf16 values; sums are float32 (as the tensor cores'), the output is rounded
to bf16. Run: python benchmarks/cuda/wgmma_fwd_model.py (tests/test_dispatch.py runs it too)
"""
import numpy as np

UNITS, UNIT_W, R, D, SLOTS, BRICK = 8, 64, 16, 8, 9, 256


def bf16_bits(a):
    """float32 -> bf16 bits (round to nearest even)."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bits_f32(b):
    return (np.asarray(b, np.uint16).astype(np.uint32) << 16).view(np.float32)


def nq_for(kw):
    return (kw + 7 + 15) // 16


def conv_model(x_bits, w_bits, kh, kw, rn, lbo=128, sbo=256, ph=None, pw=None, flip=False):
    """The kernel's y (bf16 bits) for padding ph, pw before the input (default K // 2),
    the output as large as the input, the filter read rotated by 180 degrees if flip."""
    n_img, h, w_img, c_all = x_bits.shape
    ph = kh // 2 if ph is None else ph
    pw = kw // 2 if pw is None else pw
    nq = nq_for(kw)
    xw = UNIT_W - 8 + 16 * nq
    chunks = xw // 8
    assert UNITS * chunks <= 128
    wt = (w_img + UNIT_W - 1) // UNIT_W
    wpad = UNIT_W * wt + 16 * nq - 8
    wy = UNIT_W * wt
    units_all = n_img * wt
    G, P, N = R // rn, rn - 1, 8 * rn
    rows_b = kh + 2 * P
    q_stride = rows_b * BRICK
    slot_bytes = UNITS * xw * 2

    # to_planar
    xt = np.zeros((c_all, n_img, h, wpad), np.uint16)
    xt[:, :, :, pw:pw + w_img] = x_bits.transpose(3, 0, 1, 2)
    yt = np.full((c_all, n_img, h, wy), 0xFFFF, np.uint16)  # poisoned

    steps = R + kh - 1
    tiles = (h + R - 1) // R
    i_begin = lambda t: max(0, ph - t * R)
    i_end = lambda t: min(steps, h + ph - t * R)

    # per-lane constants (128 threads)
    tid = np.arange(128)
    warp, lane = tid // 32, tid % 32
    mat = lane // 8
    a_off = (2 * warp + (mat & 1)) * xw * 2 + (8 * (lane % 8) + 8 * (mat >> 1)) * 2
    gq, tig = lane // 4, lane % 4

    for c in range(c_all):
        for bx in range((units_all + UNITS - 1) // UNITS):
            unit0 = bx * UNITS
            # ---- B bricks, the kernel's word loop ----
            taps = w_bits[:, :, c].reshape(-1)
            if flip:  # taps[i] = w[(KH KW - 1 - i)]
                taps = taps[::-1]
            smem_b = np.zeros((nq * rows_b + rn) * BRICK, np.uint8)
            words = (nq * rows_b + rn) * (BRICK // 4)
            bw = np.zeros(words, np.uint32)
            for i in range(words):
                within, brick = i % (BRICK // 4), i // (BRICK // 4)
                q, r = brick // rows_b, brick % rows_b
                kb, t, kk = within // 32, (within // 4) % 8, 2 * (within % 4)
                khr = kh - 1 + P - r if q < nq else -1
                v = 0
                for e in range(2):
                    tap = 16 * q + 8 * kb + kk + e - t
                    if 0 <= khr < kh and 0 <= tap < kw:
                        v |= int(taps[khr * kw + tap]) << (16 * e)
                bw[i] = v
            smem_b[:] = bw.view(np.uint8)
            zero_off = nq * q_stride

            # ---- staging ring ----
            ring = np.full(SLOTS * slot_bytes, 0xAB, np.uint8)  # garbage until written
            su, sch = tid // chunks, tid % chunks
            stager = tid < UNITS * chunks
            sunit = unit0 + su
            sunit_ok = stager & (sunit < units_all)
            cursor = {"pt": 0, "pi": i_begin(0), "sp": 0}

            def stage_next():
                pt, pi, sp = cursor["pt"], cursor["pi"], cursor["sp"]
                if pt >= tiles:
                    return
                ih = pt * R - ph + pi
                assert 0 <= ih < h
                for th in np.nonzero(stager)[0]:
                    dst = (sp % SLOTS) * slot_bytes + su[th] * xw * 2 + 16 * sch[th]
                    if sunit_ok[th]:
                        n, wti = sunit[th] // wt, sunit[th] % wt
                        col = wti * UNIT_W + 8 * sch[th]
                        ring[dst:dst + 16] = xt[c, n, ih, col:col + 8].view(np.uint8)
                    else:
                        ring[dst:dst + 16] = 0
                cursor["sp"] = sp + 1
                pi += 1
                if pi == i_end(pt):
                    pt += 1
                    if pt < tiles:
                        pi = i_begin(pt)
                cursor["pt"], cursor["pi"] = pt, pi

            for _ in range(D):
                stage_next()

            def ldmatrix_x4(addr):  # addr: byte address per lane (128,), into ring
                rows16 = np.stack([ring[a:a + 16].view(np.uint16) for a in addr])  # (128, 8)
                regs = np.zeros((128, 4, 2), np.uint16)
                for th in range(128):
                    wbase = (th // 32) * 32
                    g, tg = (th % 32) // 4, th % 4
                    for j in range(4):
                        src = wbase + 8 * j + g  # lane giving row g of matrix j
                        regs[th, j] = rows16[src, 2 * tg:2 * tg + 2]
                return regs

            def a_matrix(regs):  # wgmma register-A fragment -> 64 x 16
                A = np.zeros((64, 16), np.uint16)
                for th in range(128):
                    w_, g, tg = th // 32, (th % 32) // 4, th % 4
                    row = 16 * w_ + g
                    A[row, 2 * tg:2 * tg + 2] = regs[th, 0]
                    A[row + 8, 2 * tg:2 * tg + 2] = regs[th, 1]
                    A[row, 2 * tg + 8:2 * tg + 10] = regs[th, 2]
                    A[row + 8, 2 * tg + 8:2 * tg + 10] = regs[th, 3]
                return bits_f32(A)

            def b_matrix(desc):
                start = (desc & 0x3FFF) << 4
                l_ = ((desc >> 16) & 0x3FFF) << 4
                s_ = ((desc >> 32) & 0x3FFF) << 4
                k = np.arange(16)[:, None]
                n = np.arange(N)[None, :]
                off = start + (n // 8) * s_ + (k // 8) * l_ + (n % 8) * 16 + (k % 8) * 2
                assert off.max() + 2 <= smem_b.size, "descriptor reads past B"
                lo = smem_b[off].astype(np.uint16)
                hi = smem_b[off + 1].astype(np.uint16)
                return bits_f32(lo | (hi << 8))

            desc0 = ((0 & 0x3FFFF) >> 4) | (((lbo >> 4) & 0x3FFF) << 16) | (((sbo >> 4) & 0x3FFF) << 32)
            s = 0
            for t in range(tiles):
                Dm = [np.zeros((64, N), np.float32) for _ in range(G)]
                for i in range(i_begin(t), i_end(t)):
                    stage_next()
                    slot = (s % SLOTS) * slot_bytes
                    A = [a_matrix(ldmatrix_x4(slot + a_off + 32 * q)) for q in range(nq)]
                    for g in range(G):
                        j0 = i - g * rn
                        active = 0 <= j0 <= kh + rn - 2
                        r0 = kh - 1 + P - j0
                        for q in range(nq):
                            off = q * q_stride + r0 * BRICK if active else zero_off
                            assert off % 16 == 0 and off >= 0
                            Dm[g] += A[q] @ b_matrix(desc0 + (off >> 4))
                    s += 1
                # store_tile: accumulator fragment -> yt
                for th in range(128):
                    w_, g8, tg = th // 32, (th % 32) // 4, th % 4
                    for half in range(2):
                        unit = unit0 + 2 * w_ + half
                        if unit >= units_all:
                            continue
                        n, wti = unit // wt, unit % wt
                        for g in range(G):
                            for j in range(rn):
                                oh = t * R + g * rn + j
                                if oh >= h:
                                    continue
                                # d[4j + 2half + e] = D[16w + g8 + 8half][8j + 2tg + e]
                                m = 16 * w_ + g8 + 8 * half
                                v = Dm[g][m, 8 * j + 2 * tg:8 * j + 2 * tg + 2]
                                col = wti * UNIT_W + 8 * g8 + 2 * tg
                                yt[c, n, oh, col:col + 2] = bf16_bits(v)
    return yt[:, :, :, :w_img].transpose(1, 2, 3, 0)  # from_planar


def direct(x, w, ph=None, pw=None):
    n, h, wd, c = x.shape
    kh, kw = w.shape[:2]
    ph = kh // 2 if ph is None else ph
    pw = kw // 2 if pw is None else pw
    xp = np.zeros((n, h + kh - 1, wd + kw - 1, c), np.float64)
    xp[:, ph:ph + h, pw:pw + wd] = x
    y = np.zeros((n, h, wd, c), np.float64)
    for i in range(kh):
        for j in range(kw):
            y += xp[:, i:i + h, j:j + wd] * w[i, j]
    return y


def check(n, h, wd, c, k, rn, seed=0, kw=None, ph=None, pw=None, flip=False):
    """k x kw filter (square if kw is None), padding ph, pw before the input, flip: the
    input gradient's rotated filter, against a direct convolution with that filter."""
    kh, kw = k, k if kw is None else kw
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, h, wd, c)).astype(np.float32)
    w = rng.uniform(-1, 1, (kh, kw, c)).astype(np.float32)
    xb, wb = bf16_bits(x), bf16_bits(w)
    y = bits_f32(conv_model(xb, wb, kh, kw, rn, ph=ph, pw=pw, flip=flip))
    w_ref = bits_f32(wb).astype(np.float64)
    if flip:
        w_ref = w_ref[::-1, ::-1]
    ref = direct(bits_f32(xb).astype(np.float64), w_ref, ph, pw)
    finite = np.isfinite(y).all()
    rel = np.abs(y - ref).max() / np.abs(ref).max() if finite else np.inf
    ok = finite and rel <= 1e-2
    print(f"N,H,W,C = {n},{h},{wd},{c} {kh}x{kw} pad ({ph}, {pw}) flip {flip} RN={rn}: max rel err {rel:.2e} "
          f"{'PASS' if ok else 'FAIL'}", flush=True)
    return ok


TRANSPOSE_CHANNELS = 64


def tile_pitch(w_img):
    return (w_img + 7) // 8 * 8 + 2


def dwconv_to_planar_kernel(x_bits, pw, wpad):
    """dwconv_to_planar_kernel's loops: per block (h, n, 64 channels) 8 channels of a pixel
    into the tile, then 8 columns of a channel row out, zeros outside the image."""
    n_img, h_img, w_img, c_all = x_bits.shape
    tp = tile_pitch(w_img)
    xt = np.full((c_all, n_img, h_img, wpad), 0xFFFF, np.uint16)  # poisoned: every element must be written
    for h in range(h_img):
        for n in range(n_img):
            for c0 in range(0, c_all, TRANSPOSE_CHANNELS):
                cb = min(TRANSPOSE_CHANNELS, c_all - c0)
                vecs = cb // 8
                tile = np.full(TRANSPOSE_CHANNELS * tp, 0xBEEF, np.uint16)  # shared memory is not zeroed
                for i in range(vecs * w_img):
                    w, j = i // vecs, i % vecs
                    v = x_bits[n, h, w, c0 + 8 * j:c0 + 8 * j + 8]
                    for e in range(8):
                        tile[(8 * j + e) * tp + w] = v[e]
                for i in range(cb * (wpad // 8)):
                    cc, q = i // (wpad // 8), i % (wpad // 8)
                    for e in range(8):
                        w = 8 * q + e - pw
                        xt[c0 + cc, n, h, 8 * q + e] = tile[cc * tp + w] if 0 <= w < w_img else 0
    return xt


def dwconv_from_planar_kernel(yt, w_img):
    """dwconv_from_planar_kernel's loops: 8 columns of a channel row into the tile, then 8
    channels of a pixel out."""
    c_all, n_img, h_img, wy = yt.shape
    tp = tile_pitch(w_img)
    chunks = (w_img + 7) // 8
    assert 8 * chunks <= wy
    y = np.full((n_img, h_img, w_img, c_all), 0xFFFF, np.uint16)
    for h in range(h_img):
        for n in range(n_img):
            for c0 in range(0, c_all, TRANSPOSE_CHANNELS):
                cb = min(TRANSPOSE_CHANNELS, c_all - c0)
                vecs = cb // 8
                tile = np.full(TRANSPOSE_CHANNELS * tp, 0xBEEF, np.uint16)
                for i in range(cb * chunks):
                    cc, q = i // chunks, i % chunks
                    tile[cc * tp + 8 * q:cc * tp + 8 * q + 8] = yt[c0 + cc, n, h, 8 * q:8 * q + 8]
                for i in range(vecs * w_img):
                    w, j = i // vecs, i % vecs
                    for e in range(8):
                        y[n, h, w, c0 + 8 * j + e] = tile[(8 * j + e) * tp + w]
    return y


def check_transposes(n, h, w_img, c, k, seed=0):
    rng = np.random.default_rng(seed)
    x_bits = rng.integers(0, 0x7F80, (n, h, w_img, c)).astype(np.uint16)
    pw, nq = k // 2, nq_for(k)
    wt = (w_img + UNIT_W - 1) // UNIT_W
    wpad, wy = UNIT_W * wt + 16 * nq - 8, UNIT_W * wt
    want = np.zeros((c, n, h, wpad), np.uint16)
    want[:, :, :, pw:pw + w_img] = x_bits.transpose(3, 0, 1, 2)
    xt = dwconv_to_planar_kernel(x_bits, pw, wpad)
    yt = np.full((c, n, h, wy), 0x1234, np.uint16)
    yt[:, :, :, :w_img] = x_bits.transpose(3, 0, 1, 2)
    ok = np.array_equal(xt, want) and np.array_equal(dwconv_from_planar_kernel(yt, w_img), x_bits)
    print(f"transposes N,H,W,C = {n},{h},{w_img},{c} k{k}: {'PASS' if ok else 'FAIL'}", flush=True)
    return ok


def check_all():
    """Every case below; True if all pass."""
    cases = [
        (9, 20, 64, 1, 7, 16),   # 8 images a block + one more block, two tiles
        (3, 21, 70, 1, 9, 4),    # width not a multiple of 64, units past the batch
        (2, 9, 5, 1, 17, 2),     # image smaller than the filter
        (1, 18, 130, 1, 31, 8),  # three strips a row
        (2, 17, 40, 1, 51, 1),   # NQ = 4, N = 8
        (2, 33, 24, 2, 13, 8),   # two channels, three tiles
    ]
    ok = all([check(*cs) for cs in cases])
    # The library's geometry: padding before the input anywhere in [0, K) (one side
    # only), a rectangular filter, the rotated filter of the input gradient.
    ok = check(3, 20, 33, 2, 9, 8, kw=7, ph=0, pw=6) and ok
    ok = check(2, 18, 70, 1, 17, 16, kw=19, ph=16, pw=0, flip=True) and ok
    ok = check(1, 9, 12, 1, 11, 8, ph=3, pw=8, flip=True) and ok
    transpose_cases = [(1, 2, 64, 64, 31), (2, 1, 5, 128, 17), (1, 2, 70, 64, 51), (1, 1, 130, 64, 7),
                       (1, 2, 9, 32, 17), (2, 1, 21, 96, 9)]  # a partial last block of channels
    ok = all([check_transposes(*cs) for cs in transpose_cases]) and ok
    print("ALL PASS" if ok else "SOME FAILED")
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if check_all() else 1)
