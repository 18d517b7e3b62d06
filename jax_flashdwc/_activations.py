"""The activations the forward kernels can fuse after the bias.

Codes match `Activation` in csrc/common/epilogue.h; the functions are the
definitions the kernels implement, and what the gradient differentiates.
"""

from __future__ import annotations

from functools import partial

import jax

ACTIVATIONS = {
    None: (0, lambda z: z),
    "relu": (1, jax.nn.relu),
    "gelu": (2, partial(jax.nn.gelu, approximate=False)),
    "gelu_tanh": (3, partial(jax.nn.gelu, approximate=True)),
    "silu": (4, jax.nn.silu),
}


def code(activation) -> int:
  return ACTIVATIONS[activation][0]


def apply(activation, z):
  return ACTIVATIONS[activation][1](z)
