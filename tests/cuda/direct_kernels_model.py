"""CPU model of the direct kernels' tap ranges (csrc/direct_kernels.cuh).

valid_taps (forward) and strided_taps (input gradient) replace a test at every tap
with a range or a progression; this checks, by brute force over small geometries,
that they visit exactly the taps the per-tap tests accept, with the same output
index. Run: python3 tests/cuda/direct_kernels_model.py
"""

import itertools
import math


def valid_taps(origin, dilation, taps, size):
  first = 0 if origin >= 0 else (-origin + dilation - 1) // dilation
  past = 0 if size - origin <= 0 else (size - origin + dilation - 1) // dilation
  return first, min(past, taps)


def strided_taps(i, pad, stride, dilation, step, taps):
  t = i + pad
  for k in range(min(step, taps)):
    r = t - k * dilation
    if math.fmod(r, stride) == 0:  # C++ % truncates toward zero, as fmod does
      return k, int(r / stride)
  return taps, 0


def main():
  checked = 0
  for size, taps, stride, dilation, pad in itertools.product(range(1, 9), range(1, 8), range(1, 5), range(1, 5),
                                                             range(-6, 9)):
    out_size = (size + 2 * max(pad, 0) - dilation * (taps - 1) - 1) // stride + 1
    if out_size <= 0:
      continue
    for o in range(out_size):  # forward
      origin = o * stride - pad
      lo, hi = valid_taps(origin, dilation, taps, size)
      want = [k for k in range(taps) if 0 <= origin + k * dilation < size]
      assert list(range(lo, hi)) == want, (size, taps, stride, dilation, pad, o)
    step = stride // math.gcd(stride, dilation)
    out_step = step * dilation // stride
    for i in range(size):  # input gradient
      first, out_first = strided_taps(i, pad, stride, dilation, step, taps)
      got, o = [], out_first
      for k in range(first, taps, step):
        if o < 0:
          break
        if o < out_size:
          got.append((k, o))
        o -= out_step
      want = [(k, (i + pad - k * dilation) // stride) for k in range(taps)
              if (i + pad - k * dilation) % stride == 0 and 0 <= (i + pad - k * dilation) // stride < out_size]
      assert got == want, (size, taps, stride, dilation, pad, i, got, want)
      checked += 1
  print(f"direct kernels' tap ranges: {checked} input positions, all as the per-tap tests")


if __name__ == "__main__":
  main()
