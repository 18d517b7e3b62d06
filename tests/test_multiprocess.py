"""A sharded training step across two processes joined by jax.distributed on the CPU
equals the same step in one process on one device.

Each process runs tests/multiprocess_step.py with two host devices: four devices in
all, the batch sharded over each process's two and the image height over the two
processes, so the convolutions' halos and the gradients' all-reduces go between
processes through the CPU collectives (gloo).
"""

import os
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

import multiprocess_step
from numerics import fresh_seed

PROCESSES = 2
TIMEOUT_S = 120


def _has_cpu_collectives():
  try:
    from jax._src.lib import _jax
  except ImportError:
    return False
  return hasattr(_jax, "make_gloo_tcp_collectives")


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.mark.skipif(not _has_cpu_collectives(),
                    reason="this jaxlib has no CPU collectives (gloo): processes cannot exchange data on the CPU")
def test_two_process_training_step_equals_one_process(tmp_path):
  seed = fresh_seed()
  port = _free_port()
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2")
  script = os.path.join(os.path.dirname(__file__), "multiprocess_step.py")
  outs = [tmp_path / f"process{i}.npz" for i in range(PROCESSES)]
  procs = [subprocess.Popen([sys.executable, script, str(i), str(PROCESSES), str(port), str(seed), str(out)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
           for i, out in enumerate(outs)]
  logs = []
  try:
    for proc in procs:
      logs.append(proc.communicate(timeout=TIMEOUT_S)[0])
  finally:
    for proc in procs:
      if proc.poll() is None:
        proc.kill()
        proc.wait()
  for i, (proc, log) in enumerate(zip(procs, logs)):
    assert proc.returncode == 0, f"process {i} failed (seed={seed}):\n{log[-4000:]}"

  x, labels, params = multiprocess_step.problem(seed)
  one = jax.devices("cpu")[0]
  expected_params, expected_loss = multiprocess_step.make_step()(*jax.device_put((params, x, labels), one))
  for i, out in enumerate(outs):
    got = np.load(out)
    assert int(got["devices"]) == 2 * PROCESSES
    # The halo exchange and the gradient all-reduces ran, and nothing was gathered.
    assert int(got["collective_permutes"]) > 0, f"process {i}: no collective-permute in the step"
    assert int(got["all_gathers"]) == 0, f"process {i}: the step gathers"
    np.testing.assert_allclose(got["loss"], np.asarray(expected_loss), rtol=1e-5, err_msg=f"seed={seed}")
    for name, value in expected_params.items():
      np.testing.assert_allclose(got[f"param_{name}"], np.asarray(value), rtol=1e-5, atol=1e-6,
                                 err_msg=f"process {i}, {name}, seed={seed}")
    # Every parameter moved: the comparison is of a real update, not of the initial values.
    for name in expected_params:
      assert not np.array_equal(got[f"param_{name}"], params[name]), name
