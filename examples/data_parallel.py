"""Data-parallel training of a small large-kernel CNN with jax_flashdwc, sharded
over every local device with NamedSharding.

The batch is split over a 1-D mesh axis "data"; parameters are replicated. The
depthwise convolutions run on each device's shard of the batch (their custom
calls carry partitioning rules), and the filter gradients are all-reduced by XLA.

  python examples/data_parallel.py --steps 50
  # On a CPU-only machine, simulate 8 devices:
  XLA_FLAGS=--xla_force_host_platform_device_count=8 python examples/data_parallel.py
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from jax_flashdwc.nn import DepthwiseConv2D

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train import make_train_step  # noqa: E402


class LargeKernelBlock(nn.Module):
  """ConvNeXt-style block: depthwise k x k, LayerNorm, pointwise MLP, residual."""

  dim: int
  kernel_size: int

  @nn.compact
  def __call__(self, x):
    h = DepthwiseConv2D(self.dim, self.kernel_size, padding="SAME", name="dwconv")(x)
    h = nn.LayerNorm()(h)
    h = nn.Dense(4 * self.dim)(h)
    h = nn.gelu(h)
    return x + nn.Dense(self.dim)(h)


class SmallNet(nn.Module):
  dim: int = 32
  kernel_size: int = 7
  depth: int = 2
  classes: int = 10

  @nn.compact
  def __call__(self, x):
    x = nn.Conv(self.dim, (4, 4), strides=4, name="stem")(x)
    for i in range(self.depth):
      x = LargeKernelBlock(self.dim, self.kernel_size, name=f"block{i}")(x)
    return nn.Dense(self.classes)(jnp.mean(x, axis=(1, 2)))


def make_data(rng, n, size, classes):
  """A learnable toy task: the class is which quadrant holds the brightest blob."""
  labels = rng.integers(0, classes, n)
  images = rng.normal(0, 0.3, (n, size, size, 3)).astype(np.float32)
  half = size // 2
  for i, label in enumerate(labels):
    r, c = divmod(int(label) % 4, 2)
    images[i, r * half:(r + 1) * half, c * half:(c + 1) * half, int(label) % 3] += 1.0 + 0.1 * (label // 4)
  return images, labels.astype(np.int32)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--steps", type=int, default=50)
  parser.add_argument("--batch", type=int, default=64, help="global batch, split over the devices")
  parser.add_argument("--size", type=int, default=32)
  args = parser.parse_args(argv)

  devices = np.array(jax.devices())
  mesh = Mesh(devices, ("data",))
  if args.batch % len(devices):
    raise ValueError(f"--batch {args.batch} must be a multiple of the {len(devices)} devices")
  batch_sharding = NamedSharding(mesh, P("data"))
  replicated = NamedSharding(mesh, P())

  model = SmallNet()
  rng = np.random.default_rng(0)
  images, labels = make_data(rng, args.batch * 8, args.size, model.classes)
  params = model.init(jax.random.key(0), jnp.asarray(images[:1]))
  optimizer = optax.adamw(3e-3)
  params, opt_state = jax.device_put((params, optimizer.init(params)), replicated)

  train_step = make_train_step(model, optimizer)

  print(f"{len(devices)} device(s): {devices[0].platform}; global batch {args.batch}")
  start = time.perf_counter()
  for step in range(args.steps):
    lo = (step * args.batch) % len(images)
    x = jax.device_put(images[lo:lo + args.batch], batch_sharding)
    y = jax.device_put(labels[lo:lo + args.batch], batch_sharding)
    params, opt_state, loss, accuracy = train_step(params, opt_state, x, y)
    if step % 10 == 0 or step == args.steps - 1:
      print(f"step {step:4d}  loss {float(loss):.4f}  accuracy {float(accuracy):.2f}")
  print(f"{args.steps} steps in {time.perf_counter() - start:.1f} s")
  return float(loss)


if __name__ == "__main__":
  main()
