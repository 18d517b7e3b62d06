"""The training example's input pipeline, on Grain.

Two random-access sources give records {"image", "label"}: `ImageFolder` (a
directory of class subfolders of image files; the image is its path, decoded
later) and `SyntheticImages` (generated on the fly from the index: a learnable
task that needs no download; the image is a uint8 array). Both go through the
same transforms, which run in Grain's worker processes: decode, then a random
resized crop and a horizontal flip for training, or a resize and center crop for
evaluation, to uint8 (size, size, 3). Batches leave the pipeline as uint8, a
quarter of float32's bytes on the way to the device; normalization happens on
the device (`normalize`).

Every random choice is a function of (seed, position in the stream): the shuffle
is Grain's index shuffle, reseeded each epoch, and the crop and flip draw from
Grain's per-element generator. A pipeline restored from `get_state()` therefore
yields exactly the batches an uninterrupted one would have.

Multi-process runs shard the index space: process p of P reads source indices
p, p + P, p + 2P, ... (the same number on every process, so that all take the
same number of steps per epoch), then shuffles its own shard.

`DeviceIterator` keeps a few batches in flight to the device as global arrays of
a sharding, and reports as its state the Grain state of the first batch not yet
handed out, which is what a checkpoint must record.

  # Write the generated data set as an ImageFolder of JPEGs (train/ and val/):
  python examples/data.py --write-image-folder build/synthetic_jpegs --size 256 --classes 100
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os

import grain
import numpy as np
from PIL import Image

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".ppm", ".tif", ".tiff")
# ImageNet's channel statistics, on the 0-255 scale.
MEAN_RGB = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STD_RGB = (0.229 * 255, 0.224 * 255, 0.225 * 255)
# Eval resizes the shorter side to size / CENTER_CROP_FRACTION and keeps the centre.
CENTER_CROP_FRACTION = 0.875


def _allow_grain_workers_without_absl_flags():
  """Grain's worker processes read an absl flag; a script that does not run
  absl.app never parses flags, and the read then raises. Mark them parsed (with
  their defaults) unless something already parsed them."""
  from absl import flags

  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()


class ImageFolder:
  """Random-access source over root/<class>/<image>: record i is {"image": path, "label": int}.

  Classes are the sorted subfolder names, or `classes` (to give an evaluation
  folder the training folder's label numbering). Files are listed once, sorted.
  """

  def __init__(self, root: str, classes: list[str] | None = None):
    if classes is None:
      classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    if not classes:
      raise ValueError(f"{root!r} holds no class subfolders")
    self.classes = list(classes)
    self.paths, labels = [], []
    for label, name in enumerate(self.classes):
      folder = os.path.join(root, name)
      if not os.path.isdir(folder):
        continue  # an eval folder may lack a class
      for file in sorted(os.listdir(folder)):
        if file.lower().endswith(IMAGE_EXTENSIONS):
          self.paths.append(os.path.join(folder, file))
          labels.append(label)
    if not self.paths:
      raise ValueError(f"{root!r} holds no images ({', '.join(IMAGE_EXTENSIONS)})")
    self.labels = np.asarray(labels, np.int32)

  def __len__(self):
    return len(self.paths)

  def __getitem__(self, index):
    return {"image": self.paths[index], "label": self.labels[index]}


class SyntheticImages:
  """Generated images: each class a smooth colour pattern, each image that pattern plus noise.

  Record i is a function of (seed, split, i) alone, so the source is random
  access and costs no storage. The class shows both in the mean colour (which a
  crop keeps) and in the layout, under per-pixel noise twice as strong as the pattern.
  """

  def __init__(self, num_images: int, classes: int = 10, size: int = 36, seed: int = 0, split: str = "train"):
    self.num_images, self.num_classes, self.size, self.seed = num_images, classes, size, seed
    self.split_id = {"train": 0, "val": 1}[split]
    coarse = np.random.default_rng([seed, 2]).normal(size=(classes, 4, 4, 3))
    # The patterns as small uint8 images, upsampled per record (cheap, and picklable to workers).
    self.patterns = np.clip(128 + 32 * coarse, 0, 255).astype(np.uint8)

  @property
  def classes(self):
    return [f"class_{i:04d}" for i in range(self.num_classes)]

  def __len__(self):
    return self.num_images

  def __getitem__(self, index):
    rng = np.random.default_rng([self.seed, self.split_id, index])
    label = int(rng.integers(self.num_classes))
    pattern = Image.fromarray(self.patterns[label]).resize((self.size, self.size), Image.BICUBIC)
    noise = rng.normal(0, 64, (self.size, self.size, 3))
    image = np.clip(np.asarray(pattern, np.float32) + noise, 0, 255).astype(np.uint8)
    return {"image": image, "label": np.int32(label)}


def _open(image, draft_size=None):
  """A record's image as an RGB PIL image: decoded from its path, or wrapped from an array."""
  if isinstance(image, np.ndarray):
    return Image.fromarray(image)
  im = Image.open(image)
  if draft_size is not None:
    # JPEG can decode at 1/2, 1/4 or 1/8 scale, never below the requested size:
    # much less work for an image that is going to be shrunk anyway.
    im.draft("RGB", (draft_size, draft_size))
  return im.convert("RGB")


def random_resized_crop_box(width, height, rng, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
  """(left, top, right, bottom) of a crop covering a random fraction `scale` of the
  area with an aspect ratio in `ratio` (log-uniform); after 10 misses, the
  central crop of the nearest allowed ratio."""
  area = width * height
  for _ in range(10):
    target = area * rng.uniform(*scale)
    aspect = math.exp(rng.uniform(math.log(ratio[0]), math.log(ratio[1])))
    w = int(round(math.sqrt(target * aspect)))
    h = int(round(math.sqrt(target / aspect)))
    if 0 < w <= width and 0 < h <= height:
      left = int(rng.integers(0, width - w + 1))
      top = int(rng.integers(0, height - h + 1))
      return left, top, left + w, top + h
  aspect = width / height
  if aspect < ratio[0]:
    w, h = width, int(round(width / ratio[0]))
  elif aspect > ratio[1]:
    w, h = int(round(height * ratio[1])), height
  else:
    w, h = width, height
  left, top = (width - w) // 2, (height - h) // 2
  return left, top, left + w, top + h


class TrainTransform(grain.transforms.RandomMap):
  """Decode, random resized crop to size x size, flip half the images; uint8 out."""

  def __init__(self, size: int, scale=(0.08, 1.0)):
    self.size, self.scale = size, tuple(scale)

  def random_map(self, record, rng):
    im = _open(record["image"])
    box = random_resized_crop_box(im.width, im.height, rng, self.scale)
    # One resampling from the crop box straight to the output size.
    im = im.resize((self.size, self.size), Image.BILINEAR, box=box)
    image = np.asarray(im, np.uint8)
    if rng.random() < 0.5:
      image = image[:, ::-1]
    return {"image": np.ascontiguousarray(image), "label": np.int32(record["label"])}


class EvalTransform(grain.transforms.Map):
  """Decode, then the centre CENTER_CROP_FRACTION of the shorter side resized to size x size."""

  def __init__(self, size: int):
    self.size = size

  def map(self, record):
    im = _open(record["image"], draft_size=int(round(self.size / CENTER_CROP_FRACTION)))
    side = CENTER_CROP_FRACTION * min(im.width, im.height)
    left, top = (im.width - side) / 2, (im.height - side) / 2
    im = im.resize((self.size, self.size), Image.BILINEAR, box=(left, top, left + side, top + side))
    return {"image": np.asarray(im, np.uint8), "label": np.int32(record["label"])}


def shard_indices(num_records: int, process_index: int, process_count: int) -> range:
  """The source indices process `process_index` of `process_count` reads for training:
  a strided slice, the same length on every process (the last few records of an
  uneven split are left out)."""
  per_process = num_records // process_count
  if per_process == 0:
    raise ValueError(f"{num_records} records cannot be split over {process_count} processes")
  return range(process_index, per_process * process_count, process_count)


def train_dataset(source, *, image_size: int, batch_size: int, seed: int = 0, process_index: int = 0,
                  process_count: int = 1, workers: int = 0, read_threads: int | None = None,
                  crop_scale=(0.08, 1.0)) -> grain.IterDataset:
  """An endless stream of training batches {"image": uint8 (B, S, S, 3), "label": int32 (B,)}.

  batch_size is this process's share of the global batch. With workers > 0,
  decoding and augmentation run in that many processes (same output as 0).
  read_threads: threads building batches in each process (default: 1 a worker
  process, else the machine's cores).
  """
  indices = shard_indices(len(source), process_index, process_count)
  ds = grain.MapDataset.source(source)[indices.start:indices.stop:indices.step]
  ds = ds.shuffle(seed=seed).repeat()
  ds = ds.random_map(TrainTransform(image_size, crop_scale), seed=seed + 1)
  ds = ds.batch(batch_size, drop_remainder=True)
  # An element here is a whole batch (9.6 MB at 64 x 224 x 224 x 3). Grain's default
  # read options (16 threads and 500 elements buffered a process) let each worker run
  # up to 500 batches ahead: with 2 workers and an idle consumer the process tree grew
  # 1.3 GB every 10 s (9.1 GB after 60 s, 2-core machine), and with 14 workers the
  # pipeline fed RepLKNet-31B (bf16, batch 64 at 224, H100) at 809 ms a step against
  # 65 ms on device-resident data. One thread and two batches ahead a worker holds the
  # tree at 0.69 GB; the same step then took 350 ms against 63 (docs/performance.md;
  # DeviceIterator._put says what remained).
  if read_threads is None:
    read_threads = 1 if workers > 0 else (os.cpu_count() or 1)
  ds = ds.to_iter_dataset(grain.ReadOptions(num_threads=read_threads, prefetch_buffer_size=max(2, read_threads)))
  if workers > 0:
    _allow_grain_workers_without_absl_flags()
    ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=2))
  return ds


def eval_batches(source, *, image_size: int, batch_size: int, process_index: int = 0, process_count: int = 1,
                 threads: int = 4):
  """Evaluation batches of this process's strided shard of `source` (every record
  once over all processes), each with a "mask" of the real records: the last
  batch is padded, and a process with a shorter shard adds all-padding batches so
  that every process runs the same number of (collective) steps."""
  shard = grain.MapDataset.source(source)[process_index::process_count]
  longest = math.ceil(len(source) / process_count)
  num_batches = math.ceil(longest / batch_size)
  ds = shard.map(EvalTransform(image_size)).batch(batch_size)
  # Elements are whole batches, as in train_dataset: two ahead a thread, not Grain's 500.
  threads = max(1, threads)
  ds = ds.to_iter_dataset(grain.ReadOptions(num_threads=threads, prefetch_buffer_size=2 * threads))
  empty = {"image": np.zeros((batch_size, image_size, image_size, 3), np.uint8),
           "label": np.zeros((batch_size,), np.int32), "mask": np.zeros((batch_size,), bool)}
  count = 0
  for batch in ds:
    n = len(batch["label"])
    out = {key: value.copy() for key, value in empty.items()}
    out["image"][:n], out["label"][:n], out["mask"][:n] = batch["image"], batch["label"], True
    count += 1
    yield out
  for _ in range(num_batches - count):
    yield empty


def normalize(images):
  """uint8 (..., 3) images to float32 with ImageNet's channel mean and std (on the device)."""
  import jax.numpy as jnp

  return (images.astype(jnp.float32) - jnp.asarray(MEAN_RGB)) / jnp.asarray(STD_RGB)


class DeviceIterator:
  """Batches of a Grain iterator as global jax.Arrays of `sharding`, `depth` ahead.

  Each process passes its local batch; the global array is the processes'
  batches side by side along the batch axis. The transfers of the next `depth`
  batches are issued before the current one is handed out, so they overlap the
  training step.

  get_state()/set_state() (bytes, JSON) make it an item for Grain's Orbax
  checkpoint handler: the state is the Grain iterator state of the first batch
  not yet handed out, i.e. where a restored run must continue, however many
  batches are in flight.
  """

  def __init__(self, dataset, sharding, depth: int = 2):
    self._dataset, self._sharding, self._depth = dataset, sharding, depth
    self._iterator = iter(dataset)
    self._queue = collections.deque()
    # The state of the next batch to pull while none has been pulled since the start
    # or a restore: None for the beginning, else the restored state. Asking a Grain
    # iterator for its state before its first batch makes its worker processes start
    # one after another instead of together: 14 workers took 20.5 s to deliver 30
    # batches (H200 machine, 64 x 224 x 224 x 3) against 2.8 s without the call, and
    # a training run's first steps waited on them (401 ms a step against 59 resident).
    self._start_state, self._pulled = None, False

  def _put(self, batch):
    import jax

    return {key: jax.make_array_from_process_local_data(self._sharding, value) for key, value in batch.items()}

  def _fill(self):
    while len(self._queue) < self._depth + 1:
      # Any iterator of batches will do; only a Grain iterator has a state to record.
      if not self._pulled:
        state = self._start_state
      else:
        state = self._iterator.get_state() if hasattr(self._iterator, "get_state") else None
      batch = next(self._iterator)
      self._pulled = True
      self._queue.append((state, self._put(batch)))

  def __iter__(self):
    return self

  def __next__(self):
    try:
      self._fill()
    except StopIteration:
      if not self._queue:
        raise
    _, batch = self._queue.popleft()
    return batch

  def get_state(self) -> bytes:
    if self._queue:
      state = self._queue[0][0]
    else:
      state = self._iterator.get_state() if self._pulled else self._start_state
    return json.dumps(state).encode()

  def set_state(self, state: bytes):
    self._queue.clear()
    state = json.loads(state)
    if state is None:
      # Saved before the first batch: start the dataset again from the beginning.
      self.close()
      self._iterator = iter(self._dataset)
    else:
      self._iterator.set_state(state)
    self._start_state, self._pulled = state, False

  def start_prefetch(self):
    """Called by Grain's checkpoint handler after a restore; batches start on the first next()."""

  def close(self):
    self._queue.clear()
    close = getattr(self._iterator, "close", None)
    if close is not None:
      close()


def write_image_folder(root: str, source, split: str, quality: int = 90) -> int:
  """Writes every record of an array source as root/<split>/<class>/<index>.jpg; returns the count."""
  classes = source.classes
  for name in classes:
    os.makedirs(os.path.join(root, split, name), exist_ok=True)
  for i in range(len(source)):
    record = source[i]
    path = os.path.join(root, split, classes[int(record["label"])], f"{i:08d}.jpg")
    Image.fromarray(record["image"]).save(path, quality=quality)
  return len(source)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--write-image-folder", required=True, metavar="DIR")
  parser.add_argument("--size", type=int, default=256, help="side of the written images")
  parser.add_argument("--classes", type=int, default=100)
  parser.add_argument("--train-images", type=int, default=12800)
  parser.add_argument("--eval-images", type=int, default=1000)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args(argv)
  for split, n in (("train", args.train_images), ("val", args.eval_images)):
    source = SyntheticImages(n, args.classes, args.size, args.seed, split)
    write_image_folder(args.write_image_folder, source, split)
    print(f"wrote {n} images to {os.path.join(args.write_image_folder, split)}")


if __name__ == "__main__":
  main()
