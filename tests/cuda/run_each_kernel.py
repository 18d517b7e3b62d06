"""Runs every CUDA kernel family once, at small shapes, for compute-sanitizer.

  compute-sanitizer --tool memcheck --kernel-name kns=dwconv_ python3 tests/cuda/run_each_kernel.py

(.ci/gpu sanitize runs all four tools.) Each call is checked against XLA on the CPU
so that a kernel the sanitizer passes is also known to have run. The reference stays
off the GPU because XLA's GPU autotuner crashed under racecheck and memcheck on the
H200 (an internal sanitizer error, then an illegal address in its redzone memset).
"""

import jax
import jax.numpy as jnp
import numpy as np

from jax_flashdwc import depthwise_conv2d

# (N, H, W, C, KH, KW, strides, dilation, dtype): which kernels each reaches.
CASES = [
    (2, 19, 37, 40, 7, 7, 1, 1, jnp.float32),     # row-stream fwd and stride-1 bwd_data, split bwd_filter
    (1, 20, 21, 12, 4, 4, 1, 1, jnp.float32),     # GEMV fwd (KW 4), stride-1 bwd_data on GEMV
    (1, 21, 48, 40, 13, 13, 1, 1, jnp.float32),   # lane GEMV fwd and stride-1 bwd_data, TM 16
    (1, 9, 28, 40, 9, 9, 1, 1, jnp.float32),      # lane GEMV, TM 8
    (2, 19, 37, 42, 5, 5, 2, 1, jnp.float32),     # GEMV stride 2, direct bwd_data, split bwd_filter (stride 2)
    (1, 17, 140, 24, 9, 9, 1, 1, jnp.bfloat16),   # tensor-core fwd and bwd_data, 2 strips, masked channels
    (1, 40, 40, 16, 31, 31, 1, 1, jnp.float16),   # tensor-core fwd with several filter chunks
    (2, 11, 13, 6, 3, 3, 3, 2, jnp.float32),      # direct fwd, direct bwd_data, direct bwd_filter
    (1, 9, 10, 5, 3, 4, 1, 1, jnp.float32),       # scalar (C % 4 != 0) paths
    (2, 13, 29, 72, 3, 3, 1, 1, jnp.bfloat16),    # half row-stream: a ragged second 64-channel block
    (2, 13, 29, 72, 4, 4, 1, 1, jnp.bfloat16),    # half GEMV: 64-channel blocks, 16-byte loads
    (2, 13, 29, 100, 5, 5, 2, 1, jnp.float16),    # half GEMV stride 2, scalar (C % 8 != 0)
]


def main():
  cpu = jax.devices("cpu")[0]
  key = jax.random.key(0)
  for n, h, w, c, kh, kw, s, d, dtype in CASES:
    kx, kk, kd, key = jax.random.split(key, 4)
    x = jax.random.uniform(kx, (n, h, w, c), jnp.float32, -1, 1).astype(dtype)
    k = jax.random.uniform(kk, (kh, kw, 1, c), jnp.float32, -1, 1).astype(dtype)
    for deterministic in (False, True):
      def f(x, k, impl, s=s, d=d, deterministic=deterministic, **fused):
        return depthwise_conv2d(x, k, strides=s, kernel_dilation=d, implementation=impl,
                                deterministic=deterministic, **fused)
      y, vjp = jax.vjp(lambda x, k: f(x, k, "flashdwc"), x, k)
      dy = jax.random.uniform(kd, y.shape, jnp.float32, -1, 1).astype(dtype)
      ours = (y, *vjp(dy))
      x_cpu, k_cpu, dy_cpu = jax.device_put((x, k, dy), cpu)
      y_ref, vjp_ref = jax.vjp(lambda x, k: f(x, k, "xla"), x_cpu, k_cpu)
      ref = (y_ref, *vjp_ref(dy_cpu))
      # The fused forward: prologue (scale, shift, relu) and epilogue (bias, gelu).
      fused = dict(bias=k[0, 0, 0], activation="gelu", input_scale=1.0 + 0.5 * k[-1, -1, 0].astype(jnp.float32),
                   input_shift=0.5 * k[0, -1, 0].astype(jnp.float32), input_activation="relu")
      ours = (*ours, f(x, k, "flashdwc", **fused))
      ref = (*ref, f(x_cpu, k_cpu, "xla", **{name: v if isinstance(v, str) else jax.device_put(v, cpu)
                                                  for name, v in fused.items()}))
      for name, a, b in zip(("y", "dx", "dw", "y fused"), ours, ref):
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        err = np.abs(a - b).max() / max(np.abs(b).max(), 1e-6)
        assert err < 5e-2, (name, (n, h, w, c, kh, kw, s, d, dtype), err)
    print(f"ok {n}x{h}x{w}x{c} k{kh}x{kw} s{s} d{d} {jnp.dtype(dtype).name}")


if __name__ == "__main__":
  main()
