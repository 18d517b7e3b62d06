"""The nnx drop-in: `Conv`, and `swap` / `intercept` for a built model.

`Conv` is `flax.nnx.Conv` (a subclass: the same constructor, attributes,
parameters and initializers, any rank) whose conv function defaults to
`jax_flashdwc.lax_conv.conv_general_dilated`: depthwise calls
(feature_group_count equal to the input channels, any multiplier) run this
library's kernels, everything else runs lax's conv through flax's own code.

`swap(model)` points every `flax.nnx.Conv` of a built model that convolves with
lax's function at the library's instead, in place: the modules, their
parameters and the model's structure stay as they are, so a checkpoint saved
before loads after. `intercept(model)` does the same for the length of a
`with` block. Needs flax (`pip install ".[nn]"`).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any, Literal, TypeVar

from flax import nnx
from jax import lax

from .lax_conv import Routed

Implementation = Literal["flashdwc", "xla"] | None
Model = TypeVar("Model")


class Conv(nnx.Conv):
  """`flax.nnx.Conv` with its depthwise calls on this library's kernels.

  Arguments as flax's, with one addition:

  implementation: None runs depthwise calls in float32, float16 and bfloat16 on
    this library's kernels and the others (float64, ...) on XLA's conv;
    "flashdwc" raises a TypeError for a depthwise call without a kernel; "xla"
    runs XLA's conv always. Used when `conv_general_dilated` is not given
    (a given conv function is used as given, as flax does).
  """

  def __init__(self, *args: Any, implementation: Implementation = None, conv_general_dilated: Any = None,
               **kwargs: Any):
    if conv_general_dilated is None:
      conv_general_dilated = Routed(implementation)
    elif implementation is not None:
      raise ValueError("give either implementation or conv_general_dilated, not both: implementation chooses "
                       f"this library's conv function; got implementation={implementation!r} and "
                       f"conv_general_dilated={conv_general_dilated!r}")
    super().__init__(*args, conv_general_dilated=conv_general_dilated, **kwargs)


def _signature() -> inspect.Signature:
  """flax's constructor signature, with this class's conv default and `implementation`."""
  params = list(inspect.signature(nnx.Conv.__init__).parameters.values())
  params = [p.replace(default=None) if p.name == "conv_general_dilated" else p for p in params]
  extra = inspect.Parameter("implementation", inspect.Parameter.KEYWORD_ONLY, default=None,
                            annotation=Implementation)
  last = next((i for i, p in enumerate(params) if p.kind is inspect.Parameter.VAR_KEYWORD), len(params))
  return inspect.Signature(params[:last] + [extra] + params[last:])


Conv.__init__.__signature__ = _signature()


def _lax_convs(model) -> list[nnx.Conv]:
  """The nnx.Conv modules of `model` (itself included) that convolve with lax's function."""
  return [node for _, node in nnx.iter_graph(model)
          if isinstance(node, nnx.Conv) and node.conv_general_dilated is lax.conv_general_dilated]


def swap(model: Model, implementation: Implementation = None) -> Model:
  """Routes the depthwise convolutions of a built nnx model to this library, in place.

  Every `flax.nnx.Conv` in `model` whose conv function is lax's (flax's default)
  gets `jax_flashdwc.lax_conv.conv_general_dilated` instead; the modules and
  their parameters are kept, so the model's state (and any checkpoint of it) is
  unchanged. Dense and grouped convolutions still run lax's conv. Returns
  `model`, for chaining.
  """
  fn = Routed(implementation)
  for conv in _lax_convs(model):
    conv.conv_general_dilated = fn
  return model


@contextlib.contextmanager
def intercept(model: Model, implementation: Implementation = None) -> Iterator[Model]:
  """`swap(model)` inside the block; lax's conv function back on exit.

      with jax_flashdwc.nnx.intercept(model):
        y = model(x)
  """
  convs = _lax_convs(model)
  fn = Routed(implementation)
  for conv in convs:
    conv.conv_general_dilated = fn
  try:
    yield model
  finally:
    for conv in convs:
      conv.conv_general_dilated = lax.conv_general_dilated
