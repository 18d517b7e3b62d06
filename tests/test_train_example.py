"""The training example: its Grain pipeline, the BatchNorm models' fused prologue,
a short run that learns and writes its outputs, and an exact resume."""

import importlib.util
import os
import sys

import numpy as np
import pytest

pytest.importorskip("optax")
pytest.importorskip("flax")
pytest.importorskip("grain")
pytest.importorskip("orbax.checkpoint")

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


def _load(name):
  if name in sys.modules and getattr(sys.modules[name], "__file__", "").startswith(os.path.abspath(EXAMPLES)):
    return sys.modules[name]
  sys.path.insert(0, os.path.abspath(EXAMPLES))  # the examples import each other
  spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, f"{name}.py"))
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module  # flax modules are dataclasses, which look themselves up here
  spec.loader.exec_module(module)
  return module


class IndexImages:
  """A source whose record i has label i and a 12x12 image of value i % 256."""

  def __init__(self, n):
    self.n = n

  def __len__(self):
    return self.n

  def __getitem__(self, i):
    return {"image": np.full((12, 12, 3), i % 256, np.uint8), "label": np.int32(i)}


def _take(iterator, n):
  return [next(iterator) for _ in range(n)]


def _same(a, b):
  return all(np.array_equal(x[k], y[k]) for x, y in zip(a, b) for k in x)


def test_pipeline_is_deterministic_and_continues_from_a_saved_state():
  data = _load("data")
  source = data.SyntheticImages(40, 4, 20, seed=1)
  make = lambda: iter(data.train_dataset(source, image_size=16, batch_size=4, seed=3))
  first, second = make(), make()
  a = _take(first, 6)
  assert _same(a, _take(second, 6))
  assert a[0]["image"].shape == (4, 16, 16, 3) and a[0]["image"].dtype == np.uint8
  assert not np.array_equal(a[0]["image"], a[1]["image"])
  state = first.get_state()
  later = _take(first, 13)  # past the 10-batch epoch: the next epoch is shuffled and cropped anew
  resumed = make()
  resumed.set_state(state)
  assert _same(later, _take(resumed, 13))
  labels = np.concatenate([b["label"] for b in a + later[:4]])
  assert not np.array_equal(labels[:40], labels[40:80])
  other_seed = iter(data.train_dataset(source, image_size=16, batch_size=4, seed=4))
  assert not _same(a, _take(other_seed, 6))


class _StateCountingIterator:
  """Wraps a Grain iterator and records when get_state() is asked before any batch."""

  def __init__(self, iterator):
    self.iterator, self.pulled, self.early_get_state = iterator, False, 0

  def __next__(self):
    self.pulled = True
    return next(self.iterator)

  def get_state(self):
    self.early_get_state += not self.pulled
    return self.iterator.get_state()

  def set_state(self, state):
    self.iterator.set_state(state)


class _CountingDataset:
  def __init__(self, dataset):
    self.dataset, self.made = dataset, []

  def __iter__(self):
    self.made.append(_StateCountingIterator(iter(self.dataset)))
    return self.made[-1]


def test_device_iterator_resumes_at_the_first_batch_not_handed_out_without_asking_a_fresh_iterator():
  """DeviceIterator's state is that of the first batch it has not handed out, before
  any batch, between batches and after a restore; and it never asks a Grain iterator
  for its state before the iterator's first batch (that makes Grain's worker
  processes start one after another)."""
  import jax
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

  data = _load("data")
  source = data.SyntheticImages(40, 4, 20, seed=1)
  sharding = NamedSharding(Mesh(np.array(jax.devices()[:1]), ("data",)), P())
  make = lambda: _CountingDataset(data.train_dataset(source, image_size=16, batch_size=4, seed=3))
  host = lambda batches: [{k: np.asarray(v) for k, v in b.items()} for b in batches]

  reference = host(_take(data.DeviceIterator(make(), sharding, depth=2), 9))
  dataset = make()
  fed = data.DeviceIterator(dataset, sharding, depth=2)
  at_start = fed.get_state()
  assert _same(reference[:3], host(_take(fed, 3)))
  after_three = fed.get_state()
  assert _same(reference[3:5], host(_take(fed, 2)))
  fed.set_state(after_three)
  assert _same(reference[3:9], host(_take(fed, 6)))
  fed.set_state(at_start)
  assert _same(reference[:4], host(_take(fed, 4)))
  assert len(dataset.made) == 2 and all(it.early_get_state == 0 for it in dataset.made)


def test_worker_processes_give_the_same_batches():
  data = _load("data")
  source = data.SyntheticImages(24, 4, 20, seed=0)
  serial = iter(data.train_dataset(source, image_size=16, batch_size=4, seed=0))
  parallel = iter(data.train_dataset(source, image_size=16, batch_size=4, seed=0, workers=1))
  try:
    assert _same(_take(serial, 5), _take(parallel, 5))
  finally:
    parallel.close()


def test_process_shards_partition_the_index_space():
  data = _load("data")
  n, count = 103, 4
  shards = [list(data.shard_indices(n, p, count)) for p in range(count)]
  assert len({len(s) for s in shards}) == 1  # every process takes as many steps per epoch
  flat = sorted(i for s in shards for i in s)
  assert len(flat) == len(set(flat)) == (n // count) * count
  # One epoch of each process's training stream holds exactly its shard.
  source = IndexImages(n)
  for p, shard in enumerate(shards):
    it = iter(data.train_dataset(source, image_size=8, batch_size=5, seed=0, process_index=p, process_count=count,
                                 crop_scale=(1.0, 1.0)))
    labels = np.concatenate([b["label"] for b in _take(it, len(shard) // 5)])
    assert len(set(labels.tolist())) == len(labels) and set(labels.tolist()) <= set(shard)
    image = next(it)["image"]
    assert image.shape == (5, 8, 8, 3)
  # Evaluation covers every record once over the processes, with as many batches on each.
  seen, lengths = [], set()
  for p in range(count):
    batches = list(data.eval_batches(source, image_size=8, batch_size=8, process_index=p, process_count=count))
    lengths.add(len(batches))
    seen += [int(label) for b in batches for label in b["label"][b["mask"]]]
  assert len(lengths) == 1 and sorted(seen) == list(range(n))


def test_image_folder_source_reads_written_jpegs(tmp_path):
  data = _load("data")
  generated = data.SyntheticImages(12, 3, 24, seed=0)
  assert data.write_image_folder(str(tmp_path), generated, "train") == 12
  folder = data.ImageFolder(str(tmp_path / "train"))
  assert len(folder) == 12 and folder.classes == generated.classes
  assert sorted(folder.labels.tolist()) == sorted(int(generated[i]["label"]) for i in range(12))
  batch = next(iter(data.train_dataset(folder, image_size=16, batch_size=4)))
  assert batch["image"].shape == (4, 16, 16, 3)
  (evaluated,) = list(data.eval_batches(folder, image_size=16, batch_size=12))
  assert evaluated["mask"].all() and sorted(evaluated["label"].tolist()) == sorted(folder.labels.tolist())


def test_folded_batch_norm_is_batch_norm_and_the_fused_prologue_matches_the_unfused_layers():
  import jax
  import jax.numpy as jnp
  from flax import linen as nn

  models = _load("models")
  h = jax.random.normal(jax.random.key(0), (4, 6, 6, 5)) * 3 + 1
  reference = nn.BatchNorm(use_running_average=False, momentum=models.BN_MOMENTUM)
  variables = reference.init(jax.random.key(1), h)
  expected, expected_stats = reference.apply(variables, h, mutable=["batch_stats"])
  (scale, shift), stats = models.FoldedBatchNorm(False).apply(variables, h, mutable=["batch_stats"])
  np.testing.assert_allclose(h * scale + shift, expected, atol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), stats, expected_stats)

  # RepLKNet's BN + ReLU ahead of two depthwise convs: in their prologue (the
  # library's layer) or computed first (flax's conv); values, batch statistics and
  # gradients (through the statistics) agree.
  x = jax.random.normal(jax.random.key(2), (4, 12, 12, 8)) * 2 + 0.5
  results = []
  for conv in ("flashdwc", "flax"):
    layer = models.BNActDWConvs(((7, 7), (5, 5)), ("large", "small"), "relu", dwconv=models.DWCONVS[conv])
    variables = layer.init(jax.random.key(0), x)

    def loss(params, x):
      (large, small), new = layer.apply({**variables, "params": params}, x, True, mutable=["batch_stats"])
      return jnp.mean(jnp.square(large + 2 * small - 1)), new

    (value, new), grads = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(variables["params"], x)
    results.append((value, grads, new, layer.apply({**variables, **new}, x)))
  (v0, g0, s0, e0), (v1, g1, s1, e1) = results
  np.testing.assert_allclose(v0, v1, rtol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5), (s0, e0), (s1, e1))
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5 * float(jnp.max(jnp.abs(b)))),
               g0, g1)


def test_short_run_learns_and_writes_metrics_plot_and_checkpoints(tmp_path):
  train = _load("train")
  losses = train.train("convnext_micro", "flashdwc", steps=24, batch=16, image_size=16, log_every=8,
                       out_dir=str(tmp_path), quiet=True, eval_every=12, checkpoint_every=12, eval_images=48,
                       crop_scale=(0.35, 1.0))
  assert len(losses) == 24
  assert np.mean(losses[-5:]) < 0.7 * np.mean(losses[:3])
  rows = open(tmp_path / "metrics.csv").read().splitlines()
  assert rows[0].startswith("step,split,loss,top1,top5")
  evals = [r.split(",") for r in rows if ",eval," in r]
  assert [int(r[0]) for r in evals] == [12, 24] and float(evals[-1][3]) > 0.3  # top-1 of 10 classes
  assert (tmp_path / "curves.png").stat().st_size > 0
  assert sorted(os.listdir(tmp_path / "checkpoints")) == ["12", "24"]


def test_a_run_stopped_mid_way_resumes_to_the_same_losses_bit_for_bit(tmp_path):
  train = _load("train")
  # slak_micro: BatchNorm statistics and the data position have to come back too.
  kwargs = dict(model_name="slak_micro", steps=6, batch=8, image_size=16, quiet=True, checkpoint_every=3,
                eval_images=0, log_every=1)
  uninterrupted = train.train(out_dir=str(tmp_path / "a"), **kwargs)

  class Stop(Exception):
    pass

  def stop_after_step_4(step):
    if step == 4:  # a step past the checkpoint at 3: it is lost and done again
      raise Stop

  with pytest.raises(Stop):
    train.train(out_dir=str(tmp_path / "b"), on_step=stop_after_step_4, **kwargs)
  resumed = train.train(out_dir=str(tmp_path / "b"), resume=True, **kwargs)
  assert len(resumed) == 3
  assert resumed == uninterrupted[3:]  # float equality: bit for bit
  assert sorted(os.listdir(tmp_path / "b" / "checkpoints")) == ["3", "6"]
  rows = [r.split(",")[0] for r in open(tmp_path / "b" / "metrics.csv").read().splitlines()[1:]]
  assert rows == [str(s) for s in range(1, 7)]  # the lost steps' rows are replaced, not repeated
  with pytest.raises(ValueError, match="other settings"):
    train.train(out_dir=str(tmp_path / "b"), resume=True, **{**kwargs, "batch": 16})
