"""Fidelity: bf16 error of the library against XLA's own bf16 conv, per layer and on a model.

A ConvNeXt-T written with plain `flax.linen.Conv` (depthwise 7x7 with bias,
LayerNorm, MLP, layer scale) runs in bf16 under two dtype policies:

  bf16:  dtype=bfloat16, param_dtype=bfloat16 (parameters stored in bf16)
  mixed: dtype=bfloat16, param_dtype=float32  (fp32 parameters, bf16 compute)

and three ways:

  (a) flax's Conv (XLA's conv),
  (b) the same model under `jax_flashdwc.nn.intercept()`,
  (c) the reference: the same parameters upcast to float32, dtype float32,
      precision HIGHEST everywhere.

Reported: the relative L2 error ||out - ref|| / ||ref|| of the logits of (a)
and (b) against (c), and, per depthwise layer, the error of the conv output
alone: the bf16 inputs that layer saw in (a) go through flax's bf16 Conv and
through ours, and through an fp32 HIGHEST conv of the same inputs and
parameters upcast. The per-layer rows split the layer into its conv (no bias)
and conv + bias, and list the library's conv on its own (`depthwise_conv2d`,
implementation="flashdwc") and with the bias in its epilogue (added in float32
before the one rounding to bf16), so that an error added by the bias rounding
shows up as a difference between columns rather than being guessed at.

  python benchmarks/fidelity.py                          # 64x64, batch 4
  python benchmarks/fidelity.py --size 96 --batch 4 --layer-scale 1e-6
  python benchmarks/fidelity.py --size 224 --batch 16    # the GPU measurement

The parameters are random (flax's initializers), with the layer scale set by
--layer-scale: ConvNeXt's 1e-6 makes each block nearly the identity at
initialization, which hides the blocks' own error behind the residual stream, so
the default is 1.0 (a trained model's layer scales are O(0.1..1)).
"""

from __future__ import annotations

import argparse
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

import jax_flashdwc
import jax_flashdwc.nn as fdnn

HIGHEST = jax.lax.Precision.HIGHEST


class Block(nn.Module):
  dim: int
  layer_scale: float
  dtype: object
  param_dtype: object
  precision: object = None

  @nn.compact
  def __call__(self, x):
    kw = dict(dtype=self.dtype, param_dtype=self.param_dtype, precision=self.precision)
    y = nn.Conv(self.dim, (7, 7), padding=3, feature_group_count=self.dim, name="dwconv", **kw)(x)
    y = nn.LayerNorm(epsilon=1e-6, dtype=self.dtype, param_dtype=self.param_dtype)(y)
    y = nn.Dense(4 * self.dim, **kw)(y)
    y = nn.gelu(y)
    y = nn.Dense(self.dim, **kw)(y)
    gamma = self.param("gamma", nn.initializers.constant(self.layer_scale), (self.dim,), self.param_dtype)
    return x + jnp.asarray(gamma, self.dtype) * y


class ConvNeXt(nn.Module):
  depths: tuple = (3, 3, 9, 3)
  dims: tuple = (96, 192, 384, 768)
  num_classes: int = 1000
  layer_scale: float = 1.0
  dtype: object = jnp.float32
  param_dtype: object = jnp.float32
  precision: object = None

  @nn.compact
  def __call__(self, x):
    kw = dict(dtype=self.dtype, param_dtype=self.param_dtype, precision=self.precision)
    ln = lambda: nn.LayerNorm(epsilon=1e-6, dtype=self.dtype, param_dtype=self.param_dtype)
    for stage, (depth, dim) in enumerate(zip(self.depths, self.dims)):
      if stage == 0:
        x = ln()(nn.Conv(dim, (4, 4), strides=4, padding="VALID", **kw)(x))
      else:
        x = nn.Conv(dim, (2, 2), strides=2, padding="VALID", **kw)(ln()(x))
      for _ in range(depth):
        x = Block(dim, self.layer_scale, self.dtype, self.param_dtype, self.precision)(x)
    x = ln()(jnp.mean(x, axis=(1, 2)))
    return nn.Dense(self.num_classes, **kw)(x)


def rel_err(out, ref):
  out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
  return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def upcast(tree):
  return jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), tree)


def dwconv_inputs(model, variables, x):
  """The input of every depthwise conv in a run of `model` (flax's Conv), by module path."""
  seen = {}

  def record(next_fun, args, kwargs, context):
    mod = context.module
    if (context.method_name == "__call__" and isinstance(mod, nn.Conv)
        and mod.feature_group_count > 1):
      seen["/".join(mod.path)] = args[0]
    return next_fun(*args, **kwargs)

  with nn.intercept_methods(record):
    model.apply(variables, x)
  return seen


def emulated(mode):
  """An interceptor computing every depthwise flax Conv another way, to test where error enters.

  "fused": the library's kernel with the bias in its epilogue (conv + bias in
  float32, one rounding to bf16): what a conv+bias fusion (cuDNN's
  convBiasActivation) gives XLA on the GPU.
  "f32": conv and bias in float32 from the bf16 operands, the result left in
  float32 for the next layer: what XLA gives when it fuses the output convert
  into the consumer (excess precision), the least error any conv can have here.
  a float e: the exact conv + bias with a relative error of e added
  (y * (1 + e * N(0, 1)), then rounded to bf16): how large a per-layer error
  would have to be to move the model's error by a given amount.
  """
  def interceptor(next_fun, args, kwargs, context):
    mod = context.module
    if not (context.method_name == "__call__" and isinstance(mod, nn.Conv) and mod.feature_group_count > 1):
      return next_fun(*args, **kwargs)
    p = mod.variables["params"]
    x = jnp.asarray(args[0], mod.dtype)
    kernel, bias = jnp.asarray(p["kernel"], mod.dtype), jnp.asarray(p["bias"], mod.dtype)
    if mod.feature_group_count != x.shape[-1] or mod.padding != 3:
      raise NotImplementedError("the emulations cover this model's depthwise 7x7 layers only")
    if mode == "fused":
      return jax_flashdwc.depthwise_conv2d(x, kernel, padding=3, bias=bias, implementation="flashdwc")
    y = jax.lax.conv_general_dilated(
        upcast(x), upcast(kernel), (1, 1), ((3, 3), (3, 3)), dimension_numbers=("NHWC", "HWIO", "NHWC"),
        feature_group_count=x.shape[-1], precision=HIGHEST)
    y = y + upcast(bias)
    if mode == "f32":
      return y
    noise = jax.random.normal(jax.random.key(hash(mod.path) % 2**31), y.shape, jnp.float32)
    return (y * (1 + mode * noise)).astype(mod.dtype)
  return nn.intercept_methods(interceptor)


def layer_rows(model, variables, x):
  """Per depthwise layer: conv-only and conv+bias errors of each path against fp32 HIGHEST."""
  inputs = dwconv_inputs(model, variables, x)
  params = variables["params"]
  rows = []
  for path, xin in inputs.items():
    p = functools.reduce(lambda t, k: t[k], path.split("/"), params)
    dim = xin.shape[-1]
    # The layer's own computation dtype: what promote_dtype gives flax's Conv.
    kernel, bias = (jnp.asarray(p["kernel"], model.dtype), jnp.asarray(p["bias"], model.dtype))
    xb = jnp.asarray(xin, model.dtype)
    conv = lambda a, k, **kw: jax.lax.conv_general_dilated(
        a, k, (1, 1), ((3, 3), (3, 3)), dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=dim, **kw)
    ref = conv(upcast(xb), upcast(kernel), precision=HIGHEST)
    ref_b = ref + upcast(bias)
    xla = conv(xb, kernel)
    ours = jax_flashdwc.depthwise_conv2d(xb, kernel, padding=3, implementation="flashdwc")
    ours_fused = jax_flashdwc.depthwise_conv2d(xb, kernel, padding=3, bias=bias, implementation="flashdwc")
    layer = nn.Conv(dim, (7, 7), padding=3, feature_group_count=dim, dtype=model.dtype,
                    param_dtype=model.param_dtype)
    flax_y = jax.jit(layer.apply)({"params": p}, xin)
    with fdnn.intercept():
      ours_y = jax.jit(layer.apply)({"params": p}, xin)
    rows.append(dict(
        layer=path, shape="x".join(map(str, xin.shape)),
        xla_conv=rel_err(xla, ref), ours_conv=rel_err(ours, ref),
        flax_conv_bias=rel_err(flax_y, ref_b), ours_conv_bias=rel_err(ours_y, ref_b),
        ours_fused_bias=rel_err(ours_fused, ref_b)))
  return rows


def run(policy, args):
  param_dtype = jnp.bfloat16 if policy == "bf16" else jnp.float32
  kw = dict(depths=tuple(args.depths), dims=tuple(args.dims), num_classes=args.classes,
            layer_scale=args.layer_scale)
  model = ConvNeXt(dtype=jnp.bfloat16, param_dtype=param_dtype, **kw)
  ref_model = ConvNeXt(dtype=jnp.float32, param_dtype=jnp.float32, precision=HIGHEST, **kw)
  kinit, kx = jax.random.split(jax.random.key(args.seed))
  x = jax.random.normal(kx, (args.batch, args.size, args.size, 3), jnp.float32)
  variables = jax.jit(model.init)(kinit, x)
  if args.bias_std:
    # flax initializes biases to zero; a trained model's are not, and a zero bias
    # cannot show an error of the bias add.
    leaves, tree = jax.tree_util.tree_flatten_with_path(variables)
    keys = jax.random.split(jax.random.fold_in(kinit, 1), len(leaves))
    leaves = [(args.bias_std * jax.random.normal(k, a.shape, jnp.float32)).astype(a.dtype)
              if getattr(path[-1], "key", None) == "bias" else a for k, (path, a) in zip(keys, leaves)]
    variables = jax.tree.unflatten(tree, leaves)
  # The reference sees the very values the bf16 model holds, upcast.
  ref = jax.jit(ref_model.apply)(upcast(variables), x)
  flax_logits = jax.jit(model.apply)(variables, x)
  with fdnn.intercept():
    ours_logits = jax.jit(model.apply)(variables, x)
  print(f"\n[{policy}] logits relative L2 error against fp32 HIGHEST "
        f"(ConvNeXt depths={kw['depths']} dims={kw['dims']}, input {args.batch}x{args.size}x{args.size}x3, "
        f"layer scale {args.layer_scale}, bias std {args.bias_std}, seed {args.seed})")
  print(f"  (a) flax nn.Conv (XLA)        {rel_err(flax_logits, ref):.3e}")
  print(f"  (b) jax_flashdwc intercept()  {rel_err(ours_logits, ref):.3e}")
  print(f"      (a) vs (b) directly       {rel_err(ours_logits, flax_logits):.3e}")
  print("  emulations (see emulated()):")
  for mode, label in (("fused", "bias in our kernel's epilogue"), ("f32", "dwconv output kept in fp32"),
                      *((e, f"dwconv rel. error +{e:g}") for e in args.noise)):
    with emulated(mode):
      logits = jax.jit(model.apply)(variables, x)
    print(f"  {label:29s} {rel_err(logits, ref):.3e}")
  if args.no_layers:
    return
  rows = layer_rows(model, variables, x)
  cols = ("xla_conv", "ours_conv", "flax_conv_bias", "ours_conv_bias", "ours_fused_bias")
  print(f"  per depthwise layer (same bf16 inputs; no bias: conv only; bias: the layer's output):")
  print(f"  {'layer':24s} {'input':16s} " + " ".join(f"{c:>15s}" for c in cols))
  for r in rows:
    print(f"  {r['layer']:24s} {r['shape']:16s} " + " ".join(f"{r[c]:15.3e}" for c in cols))
  means = {c: float(np.mean([r[c] for r in rows])) for c in cols}
  print(f"  {'mean':24s} {'':16s} " + " ".join(f"{means[c]:15.3e}" for c in cols))


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--size", type=int, default=64)
  ap.add_argument("--batch", type=int, default=4)
  ap.add_argument("--classes", type=int, default=1000)
  ap.add_argument("--depths", type=int, nargs=4, default=(3, 3, 9, 3))
  ap.add_argument("--dims", type=int, nargs=4, default=(96, 192, 384, 768))
  ap.add_argument("--layer-scale", type=float, default=1.0)
  ap.add_argument("--bias-std", type=float, default=0.1, help="std of the random biases (0: flax's zeros)")
  ap.add_argument("--noise", type=float, nargs="*", default=(2e-3, 5e-3),
                  help="relative errors injected into every depthwise conv output (emulations)")
  ap.add_argument("--policy", nargs="+", choices=("bf16", "mixed"), default=("bf16", "mixed"))
  ap.add_argument("--seed", type=int, default=int(time.time()) % 100000,
                  help="fresh by default; printed so that a run can be repeated")
  ap.add_argument("--no-layers", action="store_true", help="logits only")
  args = ap.parse_args()
  print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}")
  for policy in args.policy:
    run(policy, args)


if __name__ == "__main__":
  main()
