"""The caches that spare a benchmark's compilation and XLA's autotuning on a later run
(a capped GPU machine's next call, with the folders carried back)."""

from __future__ import annotations

import os

import jax


def use_caches(compilation_cache: str | None = None, xla_autotune_cache: str | None = None,
               xla_flags: tuple[str, ...] = ()) -> None:
  """Call before anything runs: XLA reads XLA_FLAGS once, when its first backend starts.

  compilation_cache: JAX's persistent compilation cache, keeping every compilation (XLA's
  half-precision depthwise convolutions compile in well under JAX's default 1 s threshold).
  xla_autotune_cache: XLA's per-fusion autotune results
  (--xla_gpu_per_fusion_autotune_cache_dir), read where the folder holds them and written
  where not. xla_flags: more XLA flags to set with it.
  """
  flags = list(xla_flags)
  if xla_autotune_cache:
    os.makedirs(xla_autotune_cache, exist_ok=True)
    flags.append(f"--xla_gpu_per_fusion_autotune_cache_dir={os.path.abspath(xla_autotune_cache)}")
  if flags:
    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", "")] + flags).strip()
  if compilation_cache:
    jax.config.update("jax_compilation_cache_dir", compilation_cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
