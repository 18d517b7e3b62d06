"""Runs every CUDA kernel of the 1-D convolution once, at small shapes, for compute-sanitizer.

  compute-sanitizer --tool memcheck --kernel-name kns=conv1d_ python3 tests/cuda/run_each_conv1d_kernel.py

(.ci/gpu sanitize runs it beside run_each_kernel.py under all four tools.) Each call's
outputs and gradients are checked against XLA's on the CPU, with inputs made on the
host, as run_each_kernel.py does and for the same reasons.
"""

import jax
import jax.numpy as jnp
import numpy as np

from jax_flashdwc import depthwise_conv1d, depthwise_conv1d_update

# (N, L, C, K, dilation, dtype, segments, initial state): which kernels each reaches.
CASES = [
    (2, 37, 40, 4, 1, jnp.bfloat16, False, False),  # plain fwd and split bwd on the 3-D grid, a ragged last run
    (2, 37, 40, 3, 1, jnp.float16, True, False),    # window fwd, split bwd with segments on the 3-D grid
    (2, 300, 40, 4, 1, jnp.bfloat16, True, True),   # segments and a state: split bwd on the flat grid, 3 chunks
    (3, 5, 24, 2, 1, jnp.float32, False, True),     # window fwd with a state, split bwd with a state; L < chunk
    (2, 19, 13, 4, 1, jnp.bfloat16, False, False),  # odd C: one channel a thread in the plain and window kernels
    (2, 23, 16, 6, 1, jnp.bfloat16, True, False),   # K = 6: generic fwd and bwd
    (2, 23, 12, 3, 2, jnp.float32, False, True),    # dilation 2 with a state: generic fwd and bwd
    (2, 2, 8, 4, 1, jnp.bfloat16, False, True),     # L < K - 1: the state outlasts the chunk
]

# (N, C, K, dtype) of the decoding step: vectors of channels, then one channel a thread.
STEPS = [(3, 40, 4, jnp.bfloat16), (2, 13, 3, jnp.float32)]


def main():
  cpu = jax.devices("cpu")[0]
  rng = np.random.default_rng(0)
  host = lambda shape, dtype: np.asarray(rng.uniform(-1, 1, shape).astype(np.float32), dtype=dtype)

  def check(name, case, ours, ref):
    for label, a, b in zip(name, ours, ref):
      a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
      err = np.abs(a - b).max() / max(np.abs(b).max(), 1e-6)
      assert err < 5e-2, (label, case, err)

  for case in CASES:
    n, length, c, k, d, dtype, with_segments, with_state = case
    x, w, b = host((n, length, c), dtype), host((k, 1, c), dtype), host((c,), dtype)
    state = host((n, d * (k - 1), c), dtype) if with_state else None
    seg = np.cumsum(rng.random((n, length)) < 0.2, axis=1).astype(np.int32) if with_segments else None
    dy = host((n, length, c), dtype)

    def run(device, implementation):
      put = lambda a: None if a is None else jax.device_put(a, device)
      args = (put(x), put(w), put(b)) + ((put(state),) if with_state else ())

      def f(x, w, b, *state):
        return depthwise_conv1d(x, w, kernel_dilation=d, bias=b, activation="silu", segment_ids=put(seg),
                                initial_state=state[0] if state else None, implementation=implementation)

      y, vjp = jax.vjp(f, *args)
      # The input gradient alone: the backward kernels without the filter and bias sums.
      (dx_alone,) = jax.vjp(lambda x: f(x, *args[1:]), args[0])[1](put(dy))
      return (y, dx_alone, *vjp(put(dy)))

    names = ("y", "dx alone", "dx", "dw", "db", "dstate")
    check(names, case, run(jax.devices()[0], "flashdwc"), run(cpu, "xla"))
    print(f"ok conv1d {n}x{length}x{c} k{k} d{d} {jnp.dtype(dtype).name} segments={with_segments} state={with_state}")

  for case in STEPS:
    n, c, k, dtype = case
    x_t, state, w, b = host((n, c), dtype), host((n, k - 1, c), dtype), host((k, 1, c), dtype), host((c,), dtype)
    step = lambda device, implementation: depthwise_conv1d_update(
        *jax.device_put((x_t, state, w, b), device), activation="silu", implementation=implementation)
    check(("y_t", "state"), case, step(jax.devices()[0], "flashdwc"), step(cpu, "xla"))
    print(f"ok conv1d step {n}x{c} k{k} {jnp.dtype(dtype).name}")


if __name__ == "__main__":
  main()
