"""A small gated-convolution sequence model on packed sequences: CausalConv1D end to end.

  python examples/sequence_model.py                          # a minute on a CPU
  python examples/sequence_model.py --bf16 --width 1536 --length 2048 --batch 16 --steps 500

Each block is the short-convolution mixer of Mamba-style models: LayerNorm, a Dense
projection to (u, gate), a causal depthwise convolution of u (K = 4, SiLU fused into
the kernel), u * SiLU(gate), a Dense projection back, and a residual.

The data are packed: each row of a batch concatenates sequences of random lengths,
told apart by `segment_ids`, so the convolution must not read across a boundary. A
sequence starts with two random tokens and continues by the rule token[t] =
(token[t - 2] + 1) mod V, which only its own recent tokens reveal; the loss counts the
positions the rule determines.

After training, a prompt is prefilled in parallel (`return_final_state=True` gives each
block's convolution state) and continued one token at a time with `CausalConv1D.step`
(the decoding kernel, the state carried from step to step); the step's logits must
equal those of the whole sequence run in parallel, and the greedy continuation must
follow the rule.
"""

from __future__ import annotations

import argparse
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jax_flashdwc.nn_conv1d import CausalConv1D


class Block(nn.Module):
  width: int
  kernel_size: int = 4
  dtype: jnp.dtype = jnp.float32
  implementation: str | None = None

  def setup(self):
    self.norm = nn.LayerNorm(dtype=self.dtype)
    self.proj_in = nn.Dense(2 * self.width, dtype=self.dtype)
    self.conv = CausalConv1D(self.width, self.kernel_size, activation="silu", dtype=self.dtype,
                             implementation=self.implementation)
    self.proj_out = nn.Dense(self.width, dtype=self.dtype)

  def __call__(self, x, segment_ids=None):
    """x (N, L, C) -> (x + mixed, the convolution's final state (N, K - 1, C))."""
    u, gate = jnp.split(self.proj_in(self.norm(x)), 2, axis=-1)
    u, state = self.conv(u, segment_ids=segment_ids, return_final_state=True)
    return x + self.proj_out(u * nn.silu(gate)), state

  def step(self, x_t, state):
    """One position: x_t (N, C) and the state -> (output (N, C), new state)."""
    u, gate = jnp.split(self.proj_in(self.norm(x_t)), 2, axis=-1)
    u, state = self.conv.step(u, state)
    return x_t + self.proj_out(u * nn.silu(gate)), state


class SequenceModel(nn.Module):
  vocab: int
  width: int
  depth: int
  dtype: jnp.dtype = jnp.float32
  implementation: str | None = None

  def setup(self):
    self.embed = nn.Embed(self.vocab, self.width)
    self.blocks = [Block(self.width, dtype=self.dtype, implementation=self.implementation)
                   for _ in range(self.depth)]
    self.norm = nn.LayerNorm(dtype=self.dtype)
    self.head = nn.Dense(self.vocab, dtype=jnp.float32)

  def __call__(self, tokens, segment_ids=None):
    """tokens (N, L) -> (logits (N, L, V), one state per block)."""
    x = self.embed(tokens).astype(self.dtype)
    states = []
    for block in self.blocks:
      x, state = block(x, segment_ids)
      states.append(state)
    return self.head(self.norm(x)), states

  def step(self, token_t, states):
    """token_t (N,) and the blocks' states -> (logits (N, V), new states)."""
    x = self.embed(token_t).astype(self.dtype)
    new_states = []
    for block, state in zip(self.blocks, states):
      x, state = block.step(x, state)
      new_states.append(state)
    return self.head(self.norm(x)), new_states


def packed_batch(rng, batch, length, vocab, min_len=8, max_len=40):
  """(tokens, segment_ids, determined) of shape (batch, length): rows of packed
  sequences, each two random tokens then token[t] = (token[t - 2] + 1) mod vocab;
  `determined` marks the tokens the rule fixes (the third of a sequence on)."""
  tokens = np.zeros((batch, length), np.int32)
  segments = np.zeros((batch, length), np.int32)
  determined = np.zeros((batch, length), bool)
  for row in range(batch):
    t, seg = 0, 0
    while t < length:
      n = min(int(rng.integers(min_len, max_len + 1)), length - t)
      seq = list(rng.integers(0, vocab, size=2))
      while len(seq) < n:
        seq.append((seq[-2] + 1) % vocab)
      tokens[row, t:t + n] = seq[:n]
      segments[row, t:t + n] = seg
      determined[row, t + 2:t + n] = True
      t, seg = t + n, seg + 1
  return tokens, segments, determined


def rule_continuation(prompt, steps, vocab):
  seq = list(prompt)
  for _ in range(steps):
    seq.append((seq[-2] + 1) % vocab)
  return seq[len(prompt):]


def train(steps=300, batch=16, length=128, vocab=16, width=64, depth=2, lr=3e-3, bf16=False,
          implementation=None, seed=0, quiet=False):
  """Trains the model; returns (model, params, losses, accuracies)."""
  dtype = jnp.bfloat16 if bf16 else jnp.float32
  model = SequenceModel(vocab, width, depth, dtype=dtype, implementation=implementation)
  rng = np.random.default_rng(seed)
  tokens, segments, _ = packed_batch(rng, batch, length, vocab)
  params = model.init(jax.random.key(seed), tokens[:, :-1], segments[:, :-1])
  opt = optax.adamw(optax.warmup_cosine_decay_schedule(0.0, lr, steps // 10, steps), weight_decay=0.01)
  opt_state = opt.init(params)

  def loss_fn(params, tokens, segments, determined):
    logits, _ = model.apply(params, tokens[:, :-1], segments[:, :-1])
    targets, mask = tokens[:, 1:], determined[:, 1:].astype(jnp.float32)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    correct = (jnp.argmax(logits, -1) == targets).astype(jnp.float32)
    return jnp.sum(losses * mask) / jnp.sum(mask), jnp.sum(correct * mask) / jnp.sum(mask)

  @jax.jit
  def train_step(params, opt_state, tokens, segments, determined):
    (loss, acc), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, tokens, segments, determined)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss, acc

  losses, accuracies = [], []
  start = time.perf_counter()
  for step in range(steps):
    tokens, segments, determined = packed_batch(rng, batch, length, vocab)
    params, opt_state, loss, acc = train_step(params, opt_state, tokens, segments, determined)
    losses.append(float(loss))
    accuracies.append(float(acc))
    if not quiet and (step % 50 == 0 or step == steps - 1):
      print(f"step {step:5d}  loss {losses[-1]:.4f}  accuracy {accuracies[-1]:.3f}  "
            f"({time.perf_counter() - start:.1f} s)", flush=True)
  return model, params, losses, accuracies


def generate(model, params, prompt, steps):
  """Greedy continuation of prompt (1-D ints): a parallel prefill, then one step a
  token. Returns (tokens, the steps' logits (steps, V))."""
  logits, states = model.apply(params, jnp.asarray(prompt)[None])
  step = jax.jit(lambda params, token, states: model.apply(params, token, states, method=SequenceModel.step))
  token = jnp.argmax(logits[:, -1], -1)
  out, step_logits = [], [logits[0, -1]]
  for _ in range(steps):
    out.append(int(token[0]))
    logits_t, states = step(params, token, states)
    step_logits.append(logits_t[0])
    token = jnp.argmax(logits_t, -1)
  return out, jnp.stack(step_logits[:steps])


def check_decoding(model, params, vocab, steps=24, seed=1):
  """(greedy continuation follows the rule, largest |step logits - parallel logits|)."""
  rng = np.random.default_rng(seed)
  prompt = [int(t) for t in rng.integers(0, vocab, size=2)]
  prompt += rule_continuation(prompt, 6, vocab)
  out, step_logits = generate(model, params, prompt, steps)
  whole, _ = model.apply(params, jnp.asarray(prompt + out)[None])
  parallel = whole[0, len(prompt) - 1:len(prompt) - 1 + steps]
  diff = float(jnp.max(jnp.abs(step_logits.astype(jnp.float32) - parallel.astype(jnp.float32))))
  return out == rule_continuation(prompt, steps, vocab), diff


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--steps", type=int, default=300)
  parser.add_argument("--batch", type=int, default=16)
  parser.add_argument("--length", type=int, default=128)
  parser.add_argument("--vocab", type=int, default=16)
  parser.add_argument("--width", type=int, default=64)
  parser.add_argument("--depth", type=int, default=2)
  parser.add_argument("--lr", type=float, default=3e-3)
  parser.add_argument("--bf16", action="store_true", help="compute in bfloat16 (parameters stay float32)")
  parser.add_argument("--implementation", choices=["flashdwc", "xla"], default=None,
                      help="the convolution's implementation (default: this library's kernels)")
  args = parser.parse_args(argv)
  model, params, losses, accuracies = train(args.steps, args.batch, args.length, args.vocab, args.width,
                                            args.depth, args.lr, args.bf16, args.implementation)
  follows, diff = check_decoding(model, params, args.vocab)
  print(f"final accuracy {np.mean(accuracies[-10:]):.3f}; greedy decoding follows the rule: {follows}; "
        f"step against parallel logits: max |difference| {diff:.2e}")
  return losses, accuracies, follows, diff


if __name__ == "__main__":
  main()
