"""Checkpoints of the training example, on Orbax's CheckpointManager.

A checkpoint at step s holds everything a run needs to continue as if it had
never stopped: the training state (parameters, BatchNorm statistics, optimizer
state with its schedule count, step) as an Orbax PyTree, each process's input
pipeline state through Grain's Orbax handler (one JSON file per process), and
the run's configuration, checked on resume so that a checkpoint is not continued
with a different model or batch.
"""

from __future__ import annotations

import os

import grain
import jax
import orbax.checkpoint as ocp


class Checkpointer:
  """Saves every `every` steps (and when forced) into `directory`, keeping the last `keep`."""

  def __init__(self, directory: str, every: int, keep: int = 3):
    # Orbax needs an absolute path; relative ones are taken from the working directory.
    self.directory = os.path.abspath(directory)
    self.every = every
    self._manager = ocp.CheckpointManager(
        self.directory, options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True))

  def latest_step(self) -> int | None:
    return self._manager.latest_step()

  def save(self, step: int, state, data_iterator, config: dict, force: bool = False) -> bool:
    """Saves if step is a multiple of `every` (or force); returns whether it did.

    The arrays are copied off the device before this returns (the writing goes on
    in the background), so the next training step may donate them.
    """
    if not force and (self.every <= 0 or step % self.every):
      return False
    if self._manager.latest_step() == step:
      return False  # already saved at this step (a forced save right after a periodic one)
    self._manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state),
        data=grain.checkpoint.CheckpointSave(data_iterator),
        config=ocp.args.JsonSave(config)), force=True)
    return True

  def restore(self, state_template, data_iterator, config: dict, step: int | None = None):
    """The state saved at `step` (default: the latest), laid out like `state_template`
    (arrays or jax.ShapeDtypeStruct, with their shardings); the data iterator is set
    to continue after that step. Raises if the saved configuration differs from
    `config` in a field that changes the computation."""
    step = self._manager.latest_step() if step is None else step
    saved = self._manager.restore(step, args=ocp.args.Composite(config=ocp.args.JsonRestore()))["config"]
    different = {key: (saved.get(key), value) for key, value in config.items() if saved.get(key) != value}
    if different:
      raise ValueError(f"the checkpoint at step {step} in {self.directory} was written by a run with other "
                       f"settings (saved, now): {different}")
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state_template)
    restored = self._manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract),
        data=grain.checkpoint.CheckpointRestore(data_iterator)))
    return restored["state"]

  def close(self):
    """Waits for the background writes, then releases the manager."""
    self._manager.wait_until_finished()
    self._manager.close()
