import os
import sys

# Eight host devices for the sharding tests; must be set before jax initializes.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_force_host_platform_device_count=8").strip()

import jax  # noqa: E402
import pytest  # noqa: E402

# The tests import tests/shapes.py and tests/numerics.py as top-level modules.
sys.path.insert(0, os.path.dirname(__file__))

from jax_flashdwc import _ffi  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def poison_outputs():
  """Every kernel output starts as NaN, so an element left unwritten fails its test."""
  _ffi.set_poison_outputs(True)
  yield
  _ffi.set_poison_outputs(False)


def _gpu_devices():
  try:
    return jax.devices("gpu")
  except RuntimeError:
    return []


@pytest.fixture(params=["cpu", "gpu"])
def device(request):
  """Each numerical test runs on the CPU handlers and, where a GPU exists, on the CUDA ones."""
  if request.param == "cpu":
    return jax.devices("cpu")[0]
  gpus = _gpu_devices()
  if not gpus:
    pytest.skip("no GPU present")
  if not _ffi.cuda_available():
    pytest.fail("a GPU is present but jax_flashdwc was built without CUDA")
  return gpus[0]
