"""What a benchmark CSV records about where it ran: GPU, driver, jax, commit, date."""

from __future__ import annotations

import datetime
import os
import subprocess

import jax


def provenance() -> dict[str, str]:
  """The commit comes from FLASHDWC_COMMIT, not git: the device machine's
  `git rev-parse` has named an older commit than the tree it was sent."""
  driver = "unknown"
  try:
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
  except Exception:  # no nvidia-smi: a CPU run
    pass
  dev = jax.devices()[0]
  return {
      "gpu": getattr(dev, "device_kind", dev.platform),
      "driver": driver,
      "jax_version": jax.__version__,
      "commit": os.environ.get("FLASHDWC_COMMIT", "unknown"),
      "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
  }
