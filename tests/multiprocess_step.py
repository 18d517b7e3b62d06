"""One training step of a small large-kernel CNN, run by tests/test_multiprocess.py in
one process and, through this file's main(), in each of several processes joined by
jax.distributed (CPU collectives).

The net: a 7x7 depthwise conv with bias and GELU in the fused kernel, a 1x1
channel mix, a 9x9 stride-2 depthwise conv, global pooling and a linear head;
softmax cross-entropy, one SGD update. Across processes the batch is sharded over
one mesh axis and the image height over the other, the height axis spanning the
processes, so the halo exchange and the gradient all-reduces cross a process
boundary.

  python tests/multiprocess_step.py PROCESS_ID NUM_PROCESSES PORT SEED OUT.npz
"""

from __future__ import annotations

import os
import sys

import numpy as np

BATCH, SIZE, CHANNELS, CLASSES = 4, 32, 8, 5
LEARNING_RATE = 0.5


def problem(seed):
  """Inputs, labels and parameters, from numpy so every process builds the same ones."""
  rng = np.random.default_rng(seed)
  f32 = lambda *shape, scale=1.0: (scale * rng.uniform(-1, 1, shape)).astype(np.float32)
  x = f32(BATCH, SIZE, SIZE, CHANNELS)
  labels = rng.integers(0, CLASSES, BATCH).astype(np.int32)
  params = {"dw1": f32(7, 7, 1, CHANNELS, scale=0.3), "b1": f32(CHANNELS, scale=0.1),
            "mix": f32(CHANNELS, CHANNELS, scale=0.5), "dw2": f32(9, 9, 1, CHANNELS, scale=0.2),
            "head": f32(CHANNELS, CLASSES)}
  return x, labels, params


def make_step():
  import jax
  import jax.numpy as jnp

  from jax_flashdwc import depthwise_conv2d

  def logits(params, x):
    h = depthwise_conv2d(x, params["dw1"], bias=params["b1"], activation="gelu", implementation="flashdwc")
    h = h @ params["mix"]
    h = depthwise_conv2d(h, params["dw2"], strides=2, implementation="flashdwc")
    return jnp.mean(h, axis=(1, 2)) @ params["head"]

  def loss(params, x, labels):
    out = jax.nn.log_softmax(logits(params, x))
    return -jnp.mean(jnp.take_along_axis(out, labels[:, None], axis=1))

  def step(params, x, labels):
    value, grads = jax.value_and_grad(loss)(params, x, labels)
    return jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads), value

  return jax.jit(step)


def main(argv):
  process_id, num_processes, port, seed, out_path = int(argv[0]), int(argv[1]), int(argv[2]), int(argv[3]), argv[4]
  import jax

  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=num_processes,
                             process_id=process_id, initialization_timeout=60)
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

  devices = np.array(jax.devices())
  # Processes along the first axis ("rows": the image height), local devices along
  # the second ("batch").
  mesh = Mesh(devices.reshape(num_processes, -1), ("rows", "batch"))
  x, labels, params = problem(seed)
  image = NamedSharding(mesh, P("batch", "rows"))
  replicated = NamedSharding(mesh, P())
  put = lambda a, sharding: jax.make_array_from_callback(a.shape, sharding, lambda index: a[index])
  args = (jax.tree.map(lambda p: put(p, replicated), params), put(x, image),
          put(labels, NamedSharding(mesh, P("batch"))))
  step = make_step()
  hlo = step.lower(*args).compile().as_text()
  new_params, value = step(*args)
  result = {f"param_{k}": np.asarray(v.addressable_data(0)) for k, v in new_params.items()}
  result["loss"] = np.asarray(value.addressable_data(0))
  result["devices"] = np.int64(devices.size)
  result["collective_permutes"] = np.int64(hlo.count("collective-permute("))
  result["all_gathers"] = np.int64(hlo.count("all-gather("))
  np.savez(out_path, **result)
  jax.distributed.shutdown()


if __name__ == "__main__":
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
  main(sys.argv[1:])
