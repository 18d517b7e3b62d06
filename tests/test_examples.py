"""The examples run and learn (a short smoke run on the host devices)."""

import importlib.util
import os
import sys

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
