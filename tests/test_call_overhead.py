"""benchmarks/profile_call_overhead.py's split of an executable's time into a cost a
pass and a cost a call, on the CPU: the fit recovers both from exact times, and a run
over one small registry layer and a small 1-D shape prints a line for each side."""

import importlib.util
import os

import jax.numpy as jnp
import pytest

BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "benchmarks")


@pytest.fixture
def tool(monkeypatch):
  monkeypatch.syspath_prepend(BENCHMARKS)  # the script's own imports (bench_layers, bench_conv1d)
  spec = importlib.util.spec_from_file_location("profile_call_overhead",
                                                os.path.join(BENCHMARKS, "profile_call_overhead.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_fit_recovers_the_cost_a_pass_and_a_call(tool):
  reps = (4, 16, 64)
  per_pass, per_call = tool.fit(reps, [r * 8.4e-6 + 5.2e-4 for r in reps])
  assert per_pass == pytest.approx(8.4e-6, rel=1e-9) and per_call == pytest.approx(5.2e-4, rel=1e-9)


def test_runs_on_a_small_layer_and_a_small_1d_shape(tool, monkeypatch, capsys):
  monkeypatch.setattr(tool, "LAYER_REPS", (1, 2))
  monkeypatch.setattr(tool, "CONV1D_REPS", (1, 2))
  monkeypatch.setattr(tool, "CONV1D_SHAPE", (1, 16, 8, 4))
  monkeypatch.setattr(tool, "CALLS", 1)
  tool.layer_rows(["square_3x3_7x7x96"], ["fwd"], jnp.float32)
  tool.conv1d_rows(jnp.float32)
  lines = [l for l in capsys.readouterr().out.splitlines() if "a pass" in l]
  assert len(lines) == 4, lines
  assert [l.split()[-1] for l in lines] == ["call"] * 4
  assert all("flashdwc" in l or "xla" in l for l in lines)
