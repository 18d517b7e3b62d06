"""Trains a large-kernel CNN from examples/models.py, data-parallel over every device.

  pip install ".[train]"
  python examples/train.py                                  # convnext_micro, generated data, CPU-sized
  python examples/train.py --model replknet31b --bf16 --image-size 224 --batch 128 \\
      --data-dir ~/imagenet --steps 100000 --out runs/replknet31b
  python examples/train.py --out runs/replknet31b ... --resume   # continue the latest checkpoint

Data (examples/data.py): a Grain pipeline. By default a generated, learnable
image set (made on the fly, no download; a train and a val split); with
`--data-dir`, an ImageFolder: DIR/train and DIR/val if present, else DIR is the
training folder and `--eval-dir` the optional evaluation folder. Decoding and
augmentation (random resized crop + flip; resize + centre crop for evaluation)
run in `--workers` processes; batches are sent to the devices ahead of the step.

Training: softmax cross-entropy, AdamW (weight decay on kernels only, not on
biases, norms or layer scales), global-norm gradient clipping, a linear warm-up
then cosine schedule. `--bf16` computes in bfloat16; parameters and optimizer
state stay float32. The global batch is split over all devices (a 1-D mesh
"data"; parameters replicated; XLA all-reduces the gradients, and BatchNorm's
batch statistics are over the global batch). On several hosts, `jax.distributed`
is initialized when the environment describes the cluster (JAX_COORDINATOR_ADDRESS,
SLURM or Open MPI) or with `--distributed`; each process then reads its own
shard of the data and feeds its devices.

Outputs, under `--out` (default runs/<model>): a progress bar (images/s, loss,
learning rate), metrics.csv (train loss/top-1 at every log step, eval loss/top-1/
top-5 at every evaluation), TensorBoard events when tensorboardX is installed,
curves.png at the end, and Orbax checkpoints in checkpoints/ (parameters, batch
statistics, optimizer state, step and the input pipeline's position) every
`--checkpoint-every` steps and at the end. `--resume` continues from the latest
checkpoint exactly: on the CPU the resumed run's losses equal an uninterrupted
run's bit for bit.

`--conv flashdwc` (default) uses jax_flashdwc's DepthwiseConv2D (BatchNorm +
ReLU ahead of a depthwise conv fused into its prologue); `--conv xla` uses
flax.linen.Conv(feature_group_count=C), i.e. XLA's own convolution, with the same
parameters, so checkpoints load into either.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import DWCONVS, MODELS  # noqa: E402

# --conv names: "xla" is flax's own conv (models.FLAX_DWCONV); "flax" stays accepted.
CONVS = {"flashdwc": "flashdwc", "xla": "flax", "flax": "flax"}


def maybe_initialize_distributed(force: bool = False) -> None:
  """jax.distributed.initialize() when this is one process of several: asked for, or
  the environment names a coordinator or a multi-task SLURM / Open MPI job (whose
  variables jax reads itself)."""
  env = os.environ
  several = (int(env.get("SLURM_NTASKS", "1")) > 1 or int(env.get("OMPI_COMM_WORLD_SIZE", "1")) > 1)
  if force or "JAX_COORDINATOR_ADDRESS" in env or several:
    jax.distributed.initialize()


def weight_decay_mask(params):
  """True for the leaves AdamW decays: kernels (2-D and up), not biases, norm scales or layer scales."""
  return jax.tree.map(lambda p: p.ndim > 1, params)


def make_optimizer(lr: float, steps: int, warmup: int, weight_decay: float = 0.05, clip: float | None = 1.0):
  """Global-norm clipping, then AdamW on a warm-up + cosine schedule (to lr / 1000)."""
  schedule = optax.warmup_cosine_decay_schedule(0.0, lr, max(1, warmup), max(steps, warmup + 1), lr * 1e-3)
  adamw = optax.adamw(schedule, b1=0.9, b2=0.999, weight_decay=weight_decay, mask=weight_decay_mask)
  return optax.chain(optax.clip_by_global_norm(clip), adamw) if clip else adamw


def _as_input(x):
  """uint8 images (from the input pipeline) are normalized on the device; floats pass."""
  if x.dtype == jnp.uint8:
    from data import normalize

    return normalize(x)
  return x


def make_train_step(model, optimizer):
  """The jitted step (variables, opt_state, x, y) -> (variables, opt_state, loss, top-1).

  `variables` is what model.init returns: "params", plus "batch_stats" for the
  BatchNorm models (updated by the step); `opt_state` is optimizer.init of
  variables["params"]. Both are donated. x: float images or uint8 from the
  pipeline; y: int labels.
  """

  def train_step(variables, opt_state, x, y):
    params = variables["params"]
    state = {key: value for key, value in variables.items() if key != "params"}

    def loss_fn(p):
      if state:
        logits, new_state = model.apply({"params": p, **state}, _as_input(x), train=True, mutable=list(state))
      else:
        logits, new_state = model.apply({"params": p}, _as_input(x), train=True), {}
      logits = logits.astype(jnp.float32)
      return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), (logits, new_state)

    (loss, (logits, new_state)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    accuracy = jnp.mean(jnp.argmax(logits, -1) == y)
    return {"params": optax.apply_updates(params, updates), **new_state}, opt_state, loss, accuracy

  return jax.jit(train_step, donate_argnums=(0, 1))


def make_eval_step(model):
  """The jitted (variables, batch) -> sums of loss, top-1 and top-5 hits, and the count, over the masked batch."""

  @jax.jit
  def eval_step(variables, batch):
    logits = model.apply(variables, _as_input(batch["image"]), train=False).astype(jnp.float32)
    y, mask = batch["label"], batch["mask"]
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    top = jax.lax.top_k(logits, min(5, logits.shape[-1]))[1]
    top1 = top[:, 0] == y
    top5 = jnp.any(top == y[:, None], axis=-1)
    return {"loss": jnp.sum(loss * mask), "top1": jnp.sum(top1 * mask), "top5": jnp.sum(top5 * mask),
            "count": jnp.sum(mask)}

  return eval_step


def evaluate(eval_step, variables, batches, sharding) -> dict:
  """Mean loss, top-1 and top-5 over the evaluation set (every process's shard)."""
  from data import DeviceIterator

  totals = None
  for sums in map(lambda b: eval_step(variables, b), DeviceIterator(iter(batches), sharding)):
    totals = sums if totals is None else jax.tree.map(jnp.add, totals, sums)
  totals = {key: float(value) for key, value in jax.device_get(totals).items()}
  count = max(totals.pop("count"), 1.0)
  return {key: value / count for key, value in totals.items()}


class MetricsLog:
  """metrics.csv (one row per log or eval point) and, when tensorboardX is installed,
  TensorBoard events. A resumed run drops the rows past its checkpoint, then appends."""

  FIELDS = ["step", "split", "loss", "top1", "top5", "lr", "images_per_s", "wall_s"]

  def __init__(self, out_dir: str, resume_step: int):
    self.path = os.path.join(out_dir, "metrics.csv")
    rows = []
    if resume_step and os.path.exists(self.path):
      with open(self.path, newline="") as f:
        rows = [row for row in csv.DictReader(f) if int(row["step"]) <= resume_step]
    with open(self.path, "w", newline="") as f:
      writer = csv.DictWriter(f, fieldnames=self.FIELDS)
      writer.writeheader()
      writer.writerows(rows)
    try:
      from tensorboardX import SummaryWriter

      self.tensorboard = SummaryWriter(os.path.join(out_dir, "tensorboard"))
    except ImportError:
      self.tensorboard = None

  def write(self, step: int, split: str, **values):
    row = {"step": step, "split": split, **{k: (f"{v:.6g}" if isinstance(v, float) else v)
                                            for k, v in values.items() if v is not None}}
    with open(self.path, "a", newline="") as f:
      csv.DictWriter(f, fieldnames=self.FIELDS).writerow(row)
    if self.tensorboard is not None:
      for key, value in values.items():
        if isinstance(value, float) and key != "wall_s":
          self.tensorboard.add_scalar(f"{split}/{key}", value, step)

  def close(self):
    if self.tensorboard is not None:
      self.tensorboard.close()


def plot_metrics(csv_path: str, png_path: str, title: str) -> None:
  """Training loss and evaluation top-1/top-5 against the step, from metrics.csv."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  with open(csv_path, newline="") as f:
    rows = list(csv.DictReader(f))
  series = lambda split, key: [(int(r["step"]), float(r[key])) for r in rows if r["split"] == split and r[key]]
  fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 3.8))
  for split, style in (("train", "-"), ("eval", "o-")):
    points = series(split, "loss")
    if points:
      ax_loss.plot(*zip(*points), style, label=f"{split} loss", linewidth=1.2, markersize=3)
  for key in ("top1", "top5"):
    points = series("eval", key)
    if points:
      ax_acc.plot(*zip(*points), "o-", label=f"eval {key}", markersize=3)
  ax_loss.set_yscale("log")
  for ax, label in ((ax_loss, "loss"), (ax_acc, "accuracy")):
    ax.set_xlabel("step")
    ax.set_ylabel(label)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
      ax.legend()
  fig.suptitle(title, fontsize=9)
  fig.tight_layout()
  fig.savefig(png_path, dpi=110)
  plt.close(fig)


class Progress:
  """A tqdm bar on the first process (plain lines without tqdm); nothing when quiet."""

  def __init__(self, total: int, initial: int, enabled: bool):
    self.bar, self.enabled = None, enabled
    if enabled:
      try:
        from tqdm import tqdm

        self.bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True, smoothing=0.1)
      except ImportError:
        pass
    self.total = total

  def update(self, step: int, count: int, **postfix):
    if self.bar is not None:
      self.bar.set_postfix(postfix, refresh=False)  # shown by the update's refresh
      self.bar.update(count)
    elif self.enabled:
      print(f"step {step:6d}/{self.total}  " + "  ".join(f"{k} {v}" for k, v in postfix.items()), flush=True)

  def write(self, line: str):
    if self.bar is not None:
      self.bar.write(line)
    elif self.enabled:
      print(line, flush=True)

  def close(self):
    if self.bar is not None:
      self.bar.close()


def make_sources(data_dir, eval_dir, image_size, classes, seed, train_images, eval_images):
  """(train source, eval source or None, number of classes, a name for the data)."""
  import data

  if data_dir is None:
    # Generated a little larger than the crop, as photographs are: the eval crop
    # takes the central CENTER_CROP_FRACTION, the train crop a random part.
    size = int(round(image_size / data.CENTER_CROP_FRACTION))
    eval_source = data.SyntheticImages(eval_images, classes, size, seed, "val") if eval_images else None
    train_source = data.SyntheticImages(train_images, classes, size, seed, "train")
    return train_source, eval_source, classes, f"synthetic{classes}"
  data_dir = os.path.expanduser(data_dir)
  if eval_dir is None and os.path.isdir(os.path.join(data_dir, "train")):
    eval_dir = os.path.join(data_dir, "val") if os.path.isdir(os.path.join(data_dir, "val")) else None
    data_dir = os.path.join(data_dir, "train")
  train_source = data.ImageFolder(data_dir)
  eval_source = data.ImageFolder(os.path.expanduser(eval_dir), train_source.classes) if eval_dir else None
  return train_source, eval_source, len(train_source.classes), os.path.abspath(data_dir)


_STEPS = {}


def train(model_name="convnext_micro", conv="flashdwc", steps=300, batch=32, image_size=32, lr=2e-3,
          bf16=False, data_dir=None, classes=10, seed=0, log_every=25, out_dir=None, quiet=False, *,
          eval_dir=None, eval_every=0, checkpoint_every=0, resume=False, workers=0, warmup=None,
          weight_decay=0.05, clip=1.0, crop_scale=(0.08, 1.0), train_images=10000, eval_images=500,
          prefetch=2, on_step=None):
  """Trains and returns the per-step training losses of this run (floats; from the
  resumed step on when resuming). batch is the global batch.

  out_dir: where metrics.csv, curves.png and checkpoints/ go (None: nowhere).
  eval_every / checkpoint_every: in steps, 0 for only at the end (if out_dir).
  on_step(step): called after each step with the number of steps done.
  """
  import data
  from checkpoint import Checkpointer

  process_index, process_count = jax.process_index(), jax.process_count()
  devices = jax.devices()
  if batch % len(devices):
    raise ValueError(f"the global batch {batch} must be a multiple of the {len(devices)} devices")
  mesh = Mesh(np.array(devices), ("data",))
  batch_sharding, replicated = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
  local_batch = batch // process_count
  log = not quiet and process_index == 0

  train_source, eval_source, classes, data_name = make_sources(data_dir, eval_dir, image_size, classes, seed,
                                                               train_images, eval_images)
  train_data = data.train_dataset(train_source, image_size=image_size, batch_size=local_batch, seed=seed,
                                  process_index=process_index, process_count=process_count, workers=workers,
                                  crop_scale=crop_scale)
  train_iter = data.DeviceIterator(train_data, batch_sharding, depth=prefetch)

  dtype = jnp.bfloat16 if bf16 else jnp.float32
  model = MODELS[model_name](DWCONVS[CONVS[conv]], classes, dtype)
  warmup = max(1, steps // 10) if warmup is None else warmup
  optimizer = make_optimizer(lr, steps, warmup, weight_decay, clip)

  def init(key):
    variables = model.init(key, jnp.zeros((1, image_size, image_size, 3), jnp.float32))
    return {"variables": variables, "opt_state": optimizer.init(variables["params"]),
            "step": jnp.zeros((), jnp.int32)}

  # Steps of an identical model and optimizer are reused, so that calling train()
  # again (a resume in the same process, the tests) does not compile them again.
  key = (model_name, CONVS[conv], bf16, classes, lr, steps, warmup, weight_decay, clip, image_size, len(devices))
  if key not in _STEPS:
    _STEPS[key] = (jax.jit(init, out_shardings=replicated), make_train_step(model, optimizer),
                   make_eval_step(model))
  init_state, train_step, eval_step = _STEPS[key]
  state = init_state(jax.random.key(seed))
  config = {"model": model_name, "global_batch": batch, "image_size": image_size, "classes": classes,
            "bf16": bf16, "data": data_name, "seed": seed, "steps": steps, "lr": lr, "warmup": warmup,
            "weight_decay": weight_decay, "clip": clip, "workers": workers, "processes": process_count,
            "crop_scale": list(crop_scale)}

  checkpointer = Checkpointer(os.path.join(out_dir, "checkpoints"), checkpoint_every) if out_dir else None
  start = 0
  if resume and checkpointer is not None and checkpointer.latest_step() is not None:
    state = checkpointer.restore(state, train_iter, config)
    start = int(state["step"])
    if log:
      print(f"resumed from step {start} of {checkpointer.directory}", flush=True)
  metrics = None
  if out_dir and process_index == 0:
    os.makedirs(out_dir, exist_ok=True)
    metrics = MetricsLog(out_dir, start if resume else 0)

  schedule_lr = lambda s: float(optimizer_lr(lr, steps, warmup, s))
  variables, opt_state = state["variables"], state["opt_state"]

  def run_eval(step):
    if eval_source is None:
      return
    batches = data.eval_batches(eval_source, image_size=image_size, batch_size=local_batch,
                                process_index=process_index, process_count=process_count,
                                threads=max(1, workers))
    result = evaluate(eval_step, variables, batches, batch_sharding)
    if metrics is not None:
      metrics.write(step, "eval", **result)
    progress.write(f"step {step}: eval loss {result['loss']:.4f}  top-1 {100 * result['top1']:.2f}%  "
                   f"top-5 {100 * result['top5']:.2f}%")

  if log:
    print(f"{model_name} ({conv}, {'bfloat16' if bf16 else 'float32'}) on {len(devices)} {devices[0].platform} "
          f"device(s), {process_count} process(es); global batch {batch}, {image_size}x{image_size}, "
          f"{classes} classes, {len(train_source)} training images ({data_name})", flush=True)
  progress = Progress(steps, start, log)
  losses, pending, last_logged, last_time = [], [], start, time.perf_counter()
  run_start = last_time
  try:
    for step in range(start, steps):
      batch_arrays = next(train_iter)
      variables, opt_state, loss, accuracy = train_step(variables, opt_state, batch_arrays["image"],
                                                        batch_arrays["label"])
      pending.append((loss, accuracy))
      done = step + 1
      if done % log_every == 0 or done == steps or done == start + 1:
        # Reading the losses waits for the device; only here, so that the next
        # steps are queued while the current ones run.
        values = jax.device_get(pending)
        losses.extend(float(v[0]) for v in values)
        now = time.perf_counter()
        # The first interval holds the compilation: no rate for it.
        rate = (done - last_logged) * batch / (now - last_time) if last_logged > start else None
        loss_value, top1 = float(values[-1][0]), float(values[-1][1])
        if metrics is not None:
          metrics.write(done, "train", loss=loss_value, top1=top1, lr=schedule_lr(step), images_per_s=rate,
                        wall_s=now - run_start)
        postfix = {"loss": f"{loss_value:.4f}", "lr": f"{schedule_lr(step):.2e}"}
        if rate is not None:
          postfix["img/s"] = f"{rate:.0f}"
        progress.update(done, done - last_logged, **postfix)
        pending, last_logged, last_time = [], done, time.perf_counter()
      if eval_every and done % eval_every == 0 and done != steps:
        run_eval(done)
        last_time = time.perf_counter()
      if checkpointer is not None:
        checkpointer.save(done, {"variables": variables, "opt_state": opt_state,
                                 "step": jax.device_put(np.int32(done), replicated)},
                          train_iter, config, force=done == steps)
      if on_step is not None:
        on_step(done)
    if start < steps:
      run_eval(steps)
  finally:
    progress.close()
    train_iter.close()
    if checkpointer is not None:
      checkpointer.close()
    if metrics is not None:
      metrics.close()
  if metrics is not None and process_index == 0:
    plot_metrics(metrics.path, os.path.join(out_dir, "curves.png"),
                 f"{model_name} ({conv}), {data_name}, global batch {batch}")
    if log:
      print(f"wrote {metrics.path}, {os.path.join(out_dir, 'curves.png')} and checkpoints in "
            f"{os.path.join(out_dir, 'checkpoints')}", flush=True)
  return losses


def optimizer_lr(lr, steps, warmup, step):
  """The learning rate of make_optimizer's schedule at a step (for the logs)."""
  return optax.warmup_cosine_decay_schedule(0.0, lr, max(1, warmup), max(steps, warmup + 1), lr * 1e-3)(step)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--model", default="convnext_micro", choices=sorted(MODELS))
  parser.add_argument("--conv", default="flashdwc", choices=["flashdwc", "xla"],
                      help="flashdwc: jax_flashdwc; xla: flax.linen.Conv(feature_group_count=C)")
  parser.add_argument("--steps", type=int, default=300)
  parser.add_argument("--batch", type=int, default=32, help="global batch, split over all devices")
  parser.add_argument("--image-size", type=int, default=32)
  parser.add_argument("--lr", type=float, default=2e-3, help="peak learning rate")
  parser.add_argument("--warmup", type=int, default=None, help="warm-up steps (default: steps / 10)")
  parser.add_argument("--weight-decay", type=float, default=0.05)
  parser.add_argument("--clip", type=float, default=1.0, help="global gradient norm clip (0: none)")
  parser.add_argument("--bf16", action="store_true", help="compute in bfloat16 (parameters stay float32)")
  parser.add_argument("--data-dir", default=None,
                      help="ImageFolder (or a folder holding train/ and val/); default: generated data")
  parser.add_argument("--eval-dir", default=None, help="ImageFolder to evaluate on")
  parser.add_argument("--classes", type=int, default=10, help="classes of the generated data")
  parser.add_argument("--train-images", type=int, default=10000, help="size of the generated training set")
  parser.add_argument("--eval-images", type=int, default=500, help="size of the generated evaluation set")
  parser.add_argument("--crop-scale", type=float, nargs=2, default=(0.08, 1.0),
                      help="area fraction range of the random resized crop")
  parser.add_argument("--workers", type=int, default=None,
                      help="input worker processes (default: 0 on CPU, where they would share the cores "
                           "with the step, else min(16, cores - 1))")
  parser.add_argument("--prefetch", type=int, default=2, help="batches in flight to the devices")
  parser.add_argument("--log-every", type=int, default=25)
  parser.add_argument("--eval-every", type=int, default=100, help="steps (0: at the end only)")
  parser.add_argument("--checkpoint-every", type=int, default=100, help="steps (0: at the end only)")
  parser.add_argument("--out", default=None, help="output folder (default: runs/<model>)")
  parser.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")
  parser.add_argument("--distributed", action="store_true", help="call jax.distributed.initialize()")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--quiet", action="store_true")
  args = parser.parse_args(argv)
  maybe_initialize_distributed(args.distributed)
  workers = args.workers
  if workers is None:
    workers = 0 if jax.default_backend() == "cpu" else min(16, max(1, (os.cpu_count() or 2) - 1))
  losses = train(args.model, args.conv, args.steps, args.batch, args.image_size, args.lr, args.bf16,
                 args.data_dir, args.classes, args.seed, args.log_every,
                 args.out or os.path.join("runs", args.model), args.quiet, eval_dir=args.eval_dir,
                 eval_every=args.eval_every, checkpoint_every=args.checkpoint_every, resume=args.resume,
                 workers=workers, warmup=args.warmup, weight_decay=args.weight_decay, clip=args.clip or None,
                 crop_scale=tuple(args.crop_scale), train_images=args.train_images, eval_images=args.eval_images,
                 prefetch=args.prefetch)
  return losses[-1] if losses else None


if __name__ == "__main__":
  main()
