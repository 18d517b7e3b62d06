"""The examples run and learn (a short smoke run on the host devices)."""

import csv
import importlib.util
import os
import sys

import numpy as np
import pytest

pytest.importorskip("optax")
pytest.importorskip("flax")

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


def _load(name):
  spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, f"{name}.py"))
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module  # flax modules are dataclasses, which look themselves up here
  spec.loader.exec_module(module)
  return module


def test_models_have_the_same_parameters_with_either_conv():
  import jax
  import jax.numpy as jnp

  models = _load("models")
  x = jnp.ones((1, 64, 64, 3))
  for name, make in models.MODELS.items():
    trees = [jax.eval_shape(make(conv, 10, jnp.float32).init, jax.random.key(0), x)
             for conv in models.DWCONVS.values()]
    assert jax.tree.structure(trees[0]) == jax.tree.structure(trees[1]), name
    assert [a.shape for a in jax.tree.leaves(trees[0])] == [a.shape for a in jax.tree.leaves(trees[1])], name


def test_training_matches_flax_conv_over_a_short_run():
  pytest.importorskip("grain")  # train.py's input pipeline (the "train" extra)
  train = _load("train").train
  # Data-parallel over the test session's host devices (tests/conftest.py), as train.py always is.
  kwargs = dict(model_name="convnext_micro", steps=40, batch=16, image_size=16, quiet=True, eval_images=0)
  ours, theirs = train(conv="flashdwc", **kwargs), train(conv="flax", **kwargs)
  assert ours[-1] < 0.8 * ours[0]
  np.testing.assert_allclose(np.mean(ours[-10:]), np.mean(theirs[-10:]), rtol=0.02)


def test_data_parallel_benchmark_measures_every_device_count(tmp_path):
  import jax

  bench = _load("bench_data_parallel")
  counts = [1, 2] if len(jax.devices()) >= 2 else [1]
  args = ["--models", "convnext_micro", "--convs", "flashdwc", "--per-device-batch", "1", "--image-size", "16",
          "--steps", "1", "--devices", *map(str, counts), "--out", str(tmp_path)]
  rows = bench.main(args)
  assert [r["devices"] for r in rows] == counts
  assert [r["global_batch"] for r in rows] == counts
  assert float(rows[0]["efficiency"]) == 1.0
  assert all(float(r["images_per_s"]) > 0 for r in rows)
  again = bench.main(args)  # resumes from the CSV: everything is there, nothing is measured twice
  assert [r["step_ms"] for r in again] == [r["step_ms"] for r in rows]


def test_profile_script_times_each_conv_and_the_scale_stand_in_has_the_same_parameters():
  import jax
  import jax.numpy as jnp

  profile = _load("profile_train_step")
  results = profile.main(["--model", "convnext_micro", "--batch", "2", "--image-size", "16", "--steps", "1",
                          "--convs", "flashdwc", "scale"])
  assert set(results) == {"flashdwc", "scale"}
  assert all(wall > 0 for wall, _ in results.values())
  models = profile.MODELS["convnext_micro"]
  x = jnp.ones((1, 16, 16, 3))
  trees = [jax.eval_shape(models(conv, 10, jnp.float32).init, jax.random.key(0), x)
           for conv in (profile.DWCONVS["flashdwc"], profile.PerChannelScale)]
  assert jax.tree.structure(trees[0]) == jax.tree.structure(trees[1])
  assert profile.category("void flashdwc::dwconv_fwd_rowstream_kernel<bf16>") == "flashdwc"
  assert profile.category("loop_convert_multiply_fusion_17") == "xla fusion"
  assert profile.category("conv2d_c1_k1_nhwc_specialized") == "xla conv (cudnn)"


def test_pipeline_benchmark_compiles_the_step_once(tmp_path, caplog):
  import logging

  import jax

  pytest.importorskip("grain")
  bench = _load("bench_pipeline")
  out, data_dir = tmp_path / "pipeline.csv", tmp_path / "images" / "train"
  batch = str(2 * len(jax.devices()))  # data-parallel over the test session's host devices
  args = ["--model", "convnext_micro", "--batch", batch, "--image-size", "16", "--images", "8", "--classes", "2",
          "--warmup", "2", "--steps", "2", "--workers", "1", "--data-dir", str(data_dir), "--out", str(out)]
  with jax.log_compiles(True), caplog.at_level(logging.WARNING, logger="jax._src.dispatch"):
    assert bench.main(args) == 0
  compiles = [r for r in caplog.records if "XLA compilation of jit(train_step)" in r.getMessage()]
  assert len(compiles) == 1, [r.getMessage() for r in compiles]  # the state is placed as the step returns it
  assert len(list(data_dir.rglob("*.jpg"))) == 8 and out.exists()  # written where --data-dir did not exist
  row = next(csv.DictReader(out.open()))
  assert float(row["input_host_ms"]) > 0 and float(row["input_device_ms"]) > 0
  assert 0 <= float(row["input_wait_ms"]) <= float(row["pipeline_ms"])


def test_sequence_model_learns_on_packed_sequences_and_decodes_step_by_step():
  seq = _load("sequence_model")
  model, params, losses, accuracies = seq.train(steps=80, quiet=True)
  assert losses[-1] < 0.1 * losses[0] and np.mean(accuracies[-5:]) > 0.95, (losses[::10], accuracies[::10])
  follows, diff = seq.check_decoding(model, params, vocab=16)
  assert follows
  # The decoding kernel's logits equal the parallel forward's to float32 rounding.
  assert diff < 1e-4, diff
