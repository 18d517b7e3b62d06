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
    (2, 19, 37, 40, 7, 7, 1, 1, jnp.float32),     # row-stream fwd and bwd_data, split bwd_filter (C % 32 != 0)
    (2, 19, 37, 64, 7, 5, 1, 1, jnp.float32),     # row-stream bwd_filter, 64-column strip (deterministic: split)
    (1, 20, 21, 12, 4, 4, 1, 1, jnp.float32),     # GEMV fwd (KW 4), stride-1 bwd_data on GEMV
    (1, 21, 48, 40, 13, 13, 1, 1, jnp.float32),   # GEMV fwd at k 13, lane bwd_filter TM 13
    (1, 9, 28, 40, 9, 9, 1, 1, jnp.float32),      # lane bwd_filter TM 9, a ragged channel block
    (2, 19, 37, 42, 5, 5, 2, 1, jnp.float32),     # GEMV stride 2, phase bwd_data (5x5, 2 channels), split bwd_filter
    (1, 17, 140, 24, 9, 9, 1, 1, jnp.bfloat16),   # tensor cores: fwd (2 strips, masked channels), bwd_data, bwd_filter
    (1, 40, 40, 16, 31, 31, 1, 1, jnp.float16),   # tensor cores: fwd (filter chunks; on sm_90 the fused call only),
                                                  # bwd_filter (2 M tiles, 2 groups); sm_90: wgmma fwd and bwd_data
    (2, 21, 70, 40, 31, 33, 1, 1, jnp.bfloat16),  # sm_90: wgmma fwd and bwd_data, W and C not multiples of 64
    (2, 11, 13, 6, 3, 3, 3, 2, jnp.float32),      # direct fwd, direct bwd_data, direct bwd_filter
    (1, 9, 10, 5, 3, 4, 1, 1, jnp.float32),       # scalar (C % 4 != 0) paths
    (2, 13, 29, 72, 3, 3, 1, 1, jnp.bfloat16),    # half row-stream fwd, ragged 2nd 64-channel block
    (2, 13, 32, 128, 3, 3, 1, 1, jnp.bfloat16),   # half row-stream bwd_filter, 32-column strip; register-filter
                                                  # fwd and bwd_data at 3x3 (row-stream fwd with the prologue)
    (2, 13, 41, 64, 5, 5, 1, 1, jnp.float16),     # register-filter fwd and bwd_data at 5x5, a last strip of 1
    (2, 13, 19, 60, 3, 3, 1, 1, jnp.float32),     # fp32 register-filter fwd and bwd_data (narrow map, 60 of 64 lanes)
    (2, 13, 29, 72, 4, 4, 1, 1, jnp.bfloat16),    # half GEMV, 64-channel blocks, 16-byte loads; split bwd_filter
    (2, 13, 29, 100, 5, 5, 2, 1, jnp.float16),    # half GEMV stride 2, scalar (C % 8 != 0); phase bwd_data at 5x5
    (2, 13, 15, 24, 3, 3, 2, 1, jnp.bfloat16),    # phase bwd_data at 3x3 (8 channels a thread), odd map
    (2, 19, 23, 64, 3, 3, 1, 3, jnp.bfloat16),    # register-filter fwd and bwd_data on residue classes in place
    (1, 13, 29, 56, 5, 5, 1, (2, 3), jnp.float16),  # the same at 5x5, unequal dilations, 28 of 32 lanes
    (2, 20, 17, 112, 7, 7, 1, (3, 2), jnp.bfloat16),  # the same at 7x7, 56 of 64 lanes
]


def main():
  cpu = jax.devices("cpu")[0]
  rng = np.random.default_rng(0)
  # Every input is made on the host and copied to the device, none by an XLA
  # kernel: initcheck flagged filter bytes that XLA's random kernel had written
  # (and PRNG keys in a host copy) as never initialized, so inputs written on the
  # device by XLA cannot tell a kernel's own uninitialized read from the tool's.
  host = lambda shape, dtype: np.asarray(rng.uniform(-1, 1, shape).astype(np.float32), dtype=dtype)
  for n, h, w, c, kh, kw, s, d, dtype in CASES:
    x_host, k_host = host((n, h, w, c), dtype), host((kh, kw, 1, c), dtype)
    x, k = jax.device_put(x_host), jax.device_put(k_host)
    x_cpu, k_cpu = jax.device_put((x_host, k_host), cpu)
    # The fused forward: prologue (scale, shift, relu) and epilogue (bias, gelu).
    fused_host = dict(bias=k_host[0, 0, 0], input_scale=1.0 + 0.5 * k_host[-1, -1, 0].astype(np.float32),
                      input_shift=0.5 * k_host[0, -1, 0].astype(np.float32))
    fused = dict(activation="gelu", input_activation="relu",
                 **{name: jax.device_put(v) for name, v in fused_host.items()})
    fused_cpu = dict(activation="gelu", input_activation="relu",
                     **{name: jax.device_put(v, cpu) for name, v in fused_host.items()})
    for deterministic in (False, True):
      def f(x, k, impl, s=s, d=d, deterministic=deterministic, **fused):
        return depthwise_conv2d(x, k, strides=s, kernel_dilation=d, implementation=impl,
                                deterministic=deterministic, **fused)
      y, vjp = jax.vjp(lambda x, k: f(x, k, "flashdwc"), x, k)
      dy_host = host(y.shape, dtype)
      ours = (y, *vjp(jax.device_put(dy_host)))
      y_ref, vjp_ref = jax.vjp(lambda x, k: f(x, k, "xla"), x_cpu, k_cpu)
      ref = (y_ref, *vjp_ref(jax.device_put(dy_host, cpu)))
      ours = (*ours, f(x, k, "flashdwc", **fused))
      ref = (*ref, f(x_cpu, k_cpu, "xla", **fused_cpu))
      for name, a, b in zip(("y", "dx", "dw", "y fused"), ours, ref):
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        err = np.abs(a - b).max() / max(np.abs(b).max(), 1e-6)
        assert err < 5e-2, (name, (n, h, w, c, kh, kw, s, d, dtype), err)
    print(f"ok {n}x{h}x{w}x{c} k{kh}x{kw} s{s} d{d} {jnp.dtype(dtype).name}")


if __name__ == "__main__":
  main()
