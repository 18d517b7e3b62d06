"""Does the input pipeline keep the GPU busy? The training step fed by Grain against the same step on device-resident data.

  python examples/bench_pipeline.py --model replknet31b --bf16 --batch 64 --image-size 224 \\
      --out benchmarks/results/pipeline_replknet31b_bf16_h100_80gb_hbm3.csv

On a machine whose calls are capped (10 minutes), --data-dir, --compilation-cache and
--xla-autotune-cache under a folder the next call keeps let a second call skip writing
the JPEGs and compiling the step.

An ImageFolder of generated JPEGs (examples/data.py's SyntheticImages, written
at 256x256, the size of a resized ImageNet photograph) is read by the training
example's own pipeline (data.train_dataset: decode, random-resized crop to
--image-size and flip in --workers processes; data.DeviceIterator: transfers
issued ahead of the step) and fed to examples/train.py's jitted step. The same
step is then timed on one batch that stays on the device. Both loops run
--steps steps after --warmup steps, and end on a block_until_ready, so each
time is the wall time of a step as a training run sees it; `slowdown` is
pipeline over resident (1.00 = the pipeline costs nothing); `input_wait_ms` is the
part of a pipeline step the host spent waiting for the next batch. `input_host_ms` and
`input_device_ms` time the pipeline alone, without the model: batches read on the
host, and batches through DeviceIterator onto the devices.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "benchmarks"))
import data  # noqa: E402
from models import DWCONVS, MODELS  # noqa: E402
from jax_caches import use_caches  # noqa: E402
from provenance import provenance  # noqa: E402
from train import CONVS, make_optimizer, make_train_step  # noqa: E402

from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402


def timed_steps(train_step, variables, opt_state, batches, warmup, steps):
  """(seconds a step, seconds a step spent waiting in next(batches), variables,
  opt_state, last loss) over `steps` steps after `warmup`; batches yields (x, y) on
  the device. The wait locates a slow pipeline: the host blocked on the next batch
  while the GPU ran the step in flight, or on the transfer."""
  for _ in range(warmup):
    x, y = next(batches)
    variables, opt_state, loss, _ = train_step(variables, opt_state, x, y)
  loss.block_until_ready()
  waited = 0.0
  start = time.perf_counter()
  for _ in range(steps):
    before = time.perf_counter()
    x, y = next(batches)
    waited += time.perf_counter() - before
    variables, opt_state, loss, _ = train_step(variables, opt_state, x, y)
  loss.block_until_ready()
  return (time.perf_counter() - start) / steps, waited / steps, variables, opt_state, float(loss)


def input_alone_ms(make_dataset, sharding, depth, warmup, steps):
  """ms a batch of the input pipeline without the model: read on the host, and
  through data.DeviceIterator onto the devices (each batch waited for), each from a
  fresh pipeline; which of the two is slow locates a bottleneck the step shows.
  `warmup` should cover every worker's first batch: the pipelines here start cold,
  unlike the training loop's, which starts during the step's compilation."""
  host = iter(make_dataset())
  for _ in range(warmup):
    next(host)
  start = time.perf_counter()
  for _ in range(steps):
    next(host)
  host_ms = 1e3 * (time.perf_counter() - start) / steps
  if hasattr(host, "close"):
    host.close()
  fed = data.DeviceIterator(make_dataset(), sharding, depth=depth)
  for _ in range(warmup):
    jax.block_until_ready(next(fed))
  start = time.perf_counter()
  for _ in range(steps):
    jax.block_until_ready(next(fed))
  device_ms = 1e3 * (time.perf_counter() - start) / steps
  fed.close()
  return host_ms, device_ms


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--model", default="replknet31b", choices=sorted(MODELS))
  parser.add_argument("--conv", default="flashdwc", choices=sorted(CONVS))
  parser.add_argument("--batch", type=int, default=64, help="global batch")
  parser.add_argument("--image-size", type=int, default=224)
  parser.add_argument("--bf16", action="store_true")
  parser.add_argument("--images", type=int, default=2048, help="JPEGs written for the ImageFolder")
  parser.add_argument("--classes", type=int, default=100)
  parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
  parser.add_argument("--read-threads", type=int, default=None,
                      help="threads building batches in each process (data.train_dataset's default)")
  parser.add_argument("--prefetch", type=int, default=2)
  parser.add_argument("--warmup", type=int, default=5)
  parser.add_argument("--steps", type=int, default=30)
  parser.add_argument("--data-dir", default=None,
                      help="an ImageFolder to read; where it does not exist, the generated JPEGs are written "
                           "there (default: a temporary folder)")
  parser.add_argument("--compilation-cache", default=None, metavar="DIR",
                      help="JAX's persistent compilation cache: a second run with the same DIR loads the "
                           "compiled step instead of compiling it again")
  parser.add_argument("--xla-autotune-cache", default=None, metavar="DIR",
                      help="XLA's per-fusion autotune results (--xla_gpu_per_fusion_autotune_cache_dir), "
                           "read where DIR holds them and written where not")
  parser.add_argument("--out", default=None, help="CSV to write")
  args = parser.parse_args(argv)
  use_caches(args.compilation_cache, args.xla_autotune_cache)

  devices = jax.devices()
  if args.batch % len(devices):
    raise ValueError(f"--batch {args.batch} must be a multiple of the {len(devices)} devices")
  mesh = Mesh(np.array(devices), ("data",))
  sharding, replicated = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
  with tempfile.TemporaryDirectory() as tmp:
    root = args.data_dir or os.path.join(tmp, "train")
    if not os.path.isdir(root):
      start = time.perf_counter()
      parent, split = os.path.split(os.path.abspath(root))
      data.write_image_folder(parent, data.SyntheticImages(args.images, args.classes, 256, 0, "train"), split)
      print(f"wrote {args.images} JPEGs to {root} in {time.perf_counter() - start:.1f} s", flush=True)
    source = data.ImageFolder(root)
    dtype = jnp.bfloat16 if args.bf16 else jnp.float32
    model = MODELS[args.model](DWCONVS[CONVS[args.conv]], len(source.classes), dtype)
    optimizer = make_optimizer(1e-3, 1000, 10)
    # Replicated, as the step returns them: state placed otherwise makes the second step
    # compile the whole training step again.
    variables = jax.jit(model.init, out_shardings=replicated)(
        jax.random.key(0), jnp.zeros((1, args.image_size, args.image_size, 3)))
    opt_state = jax.jit(optimizer.init, out_shardings=replicated)(variables["params"])
    train_step = make_train_step(model, optimizer)

    make_dataset = lambda: data.train_dataset(source, image_size=args.image_size, batch_size=args.batch,
                                              workers=args.workers, read_threads=args.read_threads)
    pipeline = data.DeviceIterator(make_dataset(), sharding, depth=args.prefetch)
    from_pipeline = ((b["image"], b["label"]) for b in pipeline)
    first = next(pipeline)
    resident = iter(lambda: (first["image"], first["label"]), None)

    # The resident loop first, so that it also carries the compilation.
    start = time.perf_counter()
    t_resident, _, variables, opt_state, _ = timed_steps(train_step, variables, opt_state, resident,
                                                         args.warmup, args.steps)
    print(f"resident: {1e3 * t_resident:.2f} ms a step ({time.perf_counter() - start:.0f} s with compilation)",
          flush=True)
    t_pipeline, t_wait, variables, opt_state, loss = timed_steps(train_step, variables, opt_state,
                                                                 from_pipeline, args.warmup, args.steps)
    pipeline.close()
    print(f"pipeline: {1e3 * t_pipeline:.2f} ms a step, {1e3 * t_wait:.2f} ms of it waiting for the next batch",
          flush=True)
    host_ms, device_ms = input_alone_ms(make_dataset, sharding, args.prefetch,
                                        max(args.warmup, args.workers + args.prefetch), args.steps)
    print(f"input alone: {host_ms:.2f} ms a batch read on the host, {device_ms:.2f} ms onto the devices",
          flush=True)

  row = {"model": args.model, "conv": args.conv, "batch": args.batch, "image_size": args.image_size,
         "dtype": "bfloat16" if args.bf16 else "float32", "workers": args.workers,
         "read_threads": args.read_threads, "steps": args.steps,
         "resident_ms": f"{1e3 * t_resident:.2f}", "pipeline_ms": f"{1e3 * t_pipeline:.2f}",
         "slowdown": f"{t_pipeline / t_resident:.3f}", "images_per_s": f"{args.batch / t_pipeline:.0f}",
         "input_wait_ms": f"{1e3 * t_wait:.2f}", "input_host_ms": f"{host_ms:.2f}",
         "input_device_ms": f"{device_ms:.2f}",
         "final_loss": f"{loss:.4f}", **provenance()}
  print(", ".join(f"{k}={v}" for k, v in row.items()))
  if args.out:
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w", newline="") as f:
      writer = csv.DictWriter(f, fieldnames=list(row))
      writer.writeheader()
      writer.writerow(row)
  return 0


if __name__ == "__main__":
  sys.exit(main())
