"""`python -m jax_flashdwc.selftest` passes on this machine's default device, and fails
when a kernel's result is off."""

import jax.numpy as jnp

from jax_flashdwc import selftest


def test_selftest_passes(capsys):
  assert selftest.main() == 0
  out = capsys.readouterr().out
  assert "0 failed" in out and "conv1d K=4 causal silu" in out and "dx alone" in out and "decoding step" in out


def test_selftest_fails_on_a_wrong_1d_result(monkeypatch, capsys):
  """A 1-D forward 5% too large in magnitude is reported, not passed."""
  monkeypatch.setattr(selftest, "PROBLEMS", [])
  monkeypatch.setattr(selftest, "CONV1D_PROBLEMS", selftest.CONV1D_PROBLEMS[:1])
  real = selftest.depthwise_conv1d

  def off(*args, **kwargs):
    y = real(*args, **kwargs)
    return y if kwargs.get("implementation") == "xla" else y + jnp.asarray(0.05, y.dtype) * jnp.abs(y)

  monkeypatch.setattr(selftest, "depthwise_conv1d", off)
  assert selftest.main() == 1
  out = capsys.readouterr().out
  assert "FAIL  conv1d K=4 causal silu" in out and " fwd " in out
