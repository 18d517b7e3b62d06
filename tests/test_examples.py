"""The examples run and learn (a short smoke run on the host devices)."""

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


def test_data_parallel_example_learns():
  final_loss = _load("data_parallel").main(["--steps", "25", "--batch", "32", "--size", "16"])
  assert final_loss < 1.0  # from ~2.3 (10 classes) at step 0


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
  train = _load("train").train
  kwargs = dict(model_name="convnext_micro", steps=40, batch=16, image_size=16, quiet=True)
  ours, theirs = train(conv="flashdwc", **kwargs), train(conv="flax", **kwargs)
  assert ours[-1] < 0.8 * ours[0]
  np.testing.assert_allclose(np.mean(ours[-10:]), np.mean(theirs[-10:]), rtol=0.02)
