"""Trains a large-kernel CNN from examples/models.py with optax AdamW.

Data: a generated, learnable image-classification set made in memory (the
default: each class is a smooth random pattern, images are pattern plus noise),
or a directory of class subfolders of images (`--data-dir`, ImageFolder layout;
needs Pillow). `--bf16` computes in bfloat16 with float32 parameters.

  python examples/train.py --model convnext_micro --steps 300 --image-size 32
  python examples/train.py --model convnext_t --conv flax --bf16 --data-dir ~/imagenette/train
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
from flax import serialization

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import DWCONVS, MODELS  # noqa: E402


def synthetic_dataset(seed: int, n: int, size: int, classes: int):
  """Images (n, size, size, 3) in float32 and int32 labels; class = smooth pattern."""
  rng = np.random.default_rng(seed)
  coarse = rng.normal(size=(classes, 4, 4, 3)).astype(np.float32)
  templates = np.asarray(jax.image.resize(jnp.asarray(coarse), (classes, size, size, 3), "bicubic"))
  # Zero-mean patterns, faint under the noise: the class is in the spatial layout
  # alone, so the network has to learn it over a few hundred steps.
  templates = 0.08 * (templates - templates.mean(axis=(1, 2), keepdims=True))
  labels = rng.integers(0, classes, n).astype(np.int32)
  images = templates[labels] + rng.normal(0, 1.0, (n, size, size, 3)).astype(np.float32)
  return images, labels


def image_folder(path: str, size: int):
  """Every image under path/<class>/ resized to size x size, scaled to [-1, 1]."""
  from PIL import Image  # optional dependency, only for --data-dir

  classes = sorted(d for d in os.listdir(path) if os.path.isdir(os.path.join(path, d)))
  if not classes:
    raise ValueError(f"--data-dir {path!r} holds no class subfolders")
  images, labels = [], []
  for label, name in enumerate(classes):
    folder = os.path.join(path, name)
    for file in sorted(os.listdir(folder)):
      try:
        with Image.open(os.path.join(folder, file)) as im:
          images.append(np.asarray(im.convert("RGB").resize((size, size)), np.float32) / 127.5 - 1.0)
          labels.append(label)
      except OSError:
        continue  # not an image
  return np.stack(images), np.asarray(labels, np.int32), len(classes)


def make_train_step(model, optimizer):
  @jax.jit
  def train_step(params, opt_state, x, y):
    def loss_fn(p):
      logits = model.apply(p, x)
      return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), logits

    (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    accuracy = jnp.mean(jnp.argmax(logits, -1) == y)
    return optax.apply_updates(params, updates), opt_state, loss, accuracy

  return train_step


def train(model_name="convnext_micro", conv="flashdwc", steps=300, batch=32, image_size=32, lr=2e-3,
          bf16=False, data_dir=None, classes=10, seed=0, log_every=25, checkpoint=None, quiet=False):
  """Trains and returns the per-step losses (a list of floats)."""
  if data_dir:
    images, labels, classes = image_folder(data_dir, image_size)
  else:
    images, labels = synthetic_dataset(seed, max(batch * 16, 1024), image_size, classes)
  dtype = jnp.bfloat16 if bf16 else jnp.float32
  model = MODELS[model_name](DWCONVS[conv], classes, dtype)
  params = model.init(jax.random.key(seed), jnp.asarray(images[:1]))
  optimizer = optax.adamw(optax.warmup_cosine_decay_schedule(0.0, lr, max(1, steps // 10), steps), weight_decay=0.05)
  opt_state = optimizer.init(params)
  train_step = make_train_step(model, optimizer)
  order = np.random.default_rng(seed + 1)
  losses = []
  start = time.perf_counter()
  for step in range(steps):
    idx = order.integers(0, len(images), batch)
    params, opt_state, loss, accuracy = train_step(params, opt_state, jnp.asarray(images[idx]),
                                                   jnp.asarray(labels[idx]))
    losses.append(float(loss))
    if not quiet and (step % log_every == 0 or step == steps - 1):
      done = (step + 1) / steps
      bar = "=" * int(30 * done) + ">" + " " * (30 - int(30 * done))
      print(f"[{bar}] step {step + 1:5d}/{steps}  loss {losses[-1]:.4f}  accuracy {float(accuracy):.2f}  "
            f"{time.perf_counter() - start:6.1f} s", flush=True)
  if checkpoint:
    with open(checkpoint, "wb") as f:
      f.write(serialization.to_bytes(params))
    if not quiet:
      print(f"checkpoint: {checkpoint}")
  return losses


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--model", default="convnext_micro", choices=sorted(MODELS))
  parser.add_argument("--conv", default="flashdwc", choices=sorted(DWCONVS),
                      help="flashdwc: jax_flashdwc; flax: flax.linen.Conv(feature_group_count=C)")
  parser.add_argument("--steps", type=int, default=300)
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--image-size", type=int, default=32)
  parser.add_argument("--lr", type=float, default=2e-3)
  parser.add_argument("--bf16", action="store_true", help="compute in bfloat16 (parameters stay float32)")
  parser.add_argument("--data-dir", default=None, help="ImageFolder directory; default: generated data")
  parser.add_argument("--checkpoint", default=None, help="write the final parameters here (msgpack)")
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args(argv)
  losses = train(args.model, args.conv, args.steps, args.batch, args.image_size, args.lr, args.bf16,
                 args.data_dir, seed=args.seed, checkpoint=args.checkpoint)
  return losses[-1]


if __name__ == "__main__":
  main()
