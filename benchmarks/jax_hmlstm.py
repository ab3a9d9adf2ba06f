"""`models.HMLSTM` in JAX: the whole training step under one `jax.jit`, `jax.lax.scan` over time.

A speed peer for the benchmarks with the same math as `models.HMLSTM` (branch and blend cell update,
optional layer norm), built from a minflux model's weights (`params_from_minflux`). The step
(forward, `jax.value_and_grad`, global-norm clip at 1, Adam) is one compiled XLA program whose
parameter and optimiser-state buffers are donated, so XLA updates them in place. As in the PyTorch
peer, each layer's step is one product over the concatenated input ``[h, z * h_above, z_below *
h_below]`` (three normalised products with layer norm) and the bottom layer's input projection is
one matmul for the whole segment; XLA fuses the elementwise work on its own.

    >>> import numpy as np
    >>> from models import HMLSTM
    >>> model = HMLSTM(11, embed_size=6, hidden_sizes=(5, 4), rng=np.random.default_rng(0))
    >>> params, config = params_from_minflux(model)
    >>> tokens = np.zeros((2, 3), np.int32)
    >>> float(loss(params, config, tokens, tokens, initial_state(config, 2))[0]) > 0
    True
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np


@dataclass(frozen=True)
class Config:
    """The static part of the model: layer sizes, layer norm, cell form and the slope."""

    sizes: tuple
    layer_norm: bool
    cell_form: str
    slope: float


@partial(jax.custom_vjp, nondiff_argnums=(1,))
def straight_through_step(x, slope):
    """z = 1 where x > 0; backward the hard sigmoid's slope (slope / 2 where |x| < 1 / slope)."""
    return (x > 0).astype(x.dtype)


def _step_fwd(x, slope):
    return straight_through_step(x, slope), x


def _step_bwd(slope, x, g):
    return (jnp.where(jnp.abs(x) * slope < 1, g * (slope / 2), 0.0),)


straight_through_step.defvjp(_step_fwd, _step_bwd)


def params_from_minflux(model) -> tuple[dict, Config]:
    """``(params, config)``: copies of ``model``'s weights (a `models.HMLSTM`) as a JAX pytree."""
    layers, out = model.layers, model.output
    weight, bias, norms = [], [], []
    for l, layer in enumerate(layers):
        rows = [layer.U] + ([layer.U_top] if layer.U_top is not None else []) + ([layer.W] if l else [])
        weight.append(jnp.asarray(np.concatenate(rows, axis=0)))
        bias.append(jnp.asarray(layer.b))
        if layer.norms:
            norms.append([(jnp.asarray(n.scale), jnp.asarray(n.shift)) for n in layer.norms])
    params = {"embed": jnp.asarray(model.embed.W), "W0": jnp.asarray(layers[0].W), "weight": weight,
              "bias": bias, "norms": norms, "gate_W": jnp.asarray(out.gate_W), "gate_b": jnp.asarray(out.gate_b),
              "embed_W": jnp.asarray(np.concatenate(out.embed_W, axis=0)), "embed_b": jnp.asarray(out.embed_b),
              "out_W": jnp.asarray(out.out_W), "out_b": jnp.asarray(out.out_b)}
    config = Config(tuple(l.hidden for l in layers), layers[0].norms is not None, model.cell_form, model.slope)
    return params, config


def minflux_gradients(grads: dict, config: Config) -> dict:
    """A gradient pytree of `params_from_minflux`'s shape, split back into `models.HMLSTM`'s names."""
    sizes, L = config.sizes, len(config.sizes)
    named = {"embed.W": grads["embed"], "layers.0.W": grads["W0"]}
    for k in ("gate_W", "gate_b", "embed_b", "out_W", "out_b"):
        named[f"output.{k}"] = grads[k]
    for l, h in enumerate(sizes):
        parts = ["U"] + (["U_top"] if l < L - 1 else []) + (["W"] if l else [])
        rows = [h] + ([sizes[l + 1]] if l < L - 1 else []) + ([sizes[l - 1]] if l else [])
        blocks = np.split(np.asarray(grads["weight"][l]), np.cumsum(rows)[:-1], axis=0)
        named.update((f"layers.{l}.{p}", b) for p, b in zip(parts, blocks))
        named[f"layers.{l}.b"] = grads["bias"][l]
        for k, (scale, shift) in enumerate(grads["norms"][l] if config.layer_norm else []):
            named[f"layers.{l}.norms.{k}.scale"], named[f"layers.{l}.norms.{k}.shift"] = scale, shift
    for l, block in enumerate(np.split(np.asarray(grads["embed_W"]), np.cumsum(sizes)[:-1], axis=0)):
        named[f"output.embed_W.{l}"] = block
    return {k: np.asarray(v) for k, v in named.items()}


def initial_state(config: Config, batch: int, dtype=jnp.float32) -> tuple:
    """Zero ``(c, h, z)`` for every layer."""
    return tuple((jnp.zeros((batch, h), dtype), jnp.zeros((batch, h), dtype), jnp.zeros((batch, 1), dtype))
                 for h in config.sizes)


def _layer_norm(x, scale_shift, eps=1e-5):
    scale, shift = scale_shift
    centred = x - x.mean(-1, keepdims=True)
    return centred * jax.lax.rsqrt((centred * centred).mean(-1, keepdims=True) + eps) * scale + shift


def _cell(config, s, H, c, h, z, z_below):
    f, i, o = jnp.split(jax.nn.sigmoid(s[:, :3 * H]), 3, axis=1)
    ig = i * jnp.tanh(s[:, 3 * H:4 * H])
    c_update = f * c + ig
    if config.cell_form == "blend":  # the paper's blend: h from the blended c
        zb = 1.0 if z_below is None else z_below
        copy = (1 - z) * (1 - zb)
        c_new = z * ig + (1 - z) * zb * c_update + copy * c
        return c_new, (1 - copy) * o * jnp.tanh(c_new) + copy * h
    flush = jax.lax.stop_gradient(z) > 0
    if z_below is None:
        c_new = jnp.where(flush, ig, c_update)
        return c_new, o * jnp.tanh(c_new)
    fired = jax.lax.stop_gradient(z_below) > 0
    c_new = jnp.where(flush, ig, jnp.where(fired, c_update, c))
    return c_new, jnp.where(flush | fired, o * jnp.tanh(c_new), h)


def _preactivation(params, config, l, bottom0, h, z, h_above, h_below, z_below):
    w, H = params["weight"][l], config.sizes[l]
    if not config.layer_norm:
        inputs = [h] + ([z * h_above] if h_above is not None else []) + ([z_below * h_below] if l else [])
        s = jnp.concatenate(inputs, axis=1) @ w
        return s + (bottom0 if l == 0 else params["bias"][l])
    n = params["norms"][l]
    s = _layer_norm(h @ w[:H], n[0])
    if h_above is not None:
        s = s + z * _layer_norm(h_above @ w[H:H + h_above.shape[1]], n[1])
    if l == 0:
        return s + bottom0
    return s + z_below * _layer_norm(h_below @ w[w.shape[0] - h_below.shape[1]:], n[2]) + params["bias"][l]


def loss(params: dict, config: Config, tokens, targets, state) -> tuple:
    """``(mean cross-entropy per character, new state)`` on ``tokens, targets (B, T)``."""
    B, T = tokens.shape
    sizes, L = config.sizes, len(config.sizes)
    x = params["embed"][tokens.T]                                           # (T, B, E)
    bottom0 = x @ params["W0"]
    if config.layer_norm:
        bottom0 = _layer_norm(bottom0, params["norms"][0][2])
    bottom0 = bottom0 + params["bias"][0]

    def step(state, b0):
        new, h_below, z_below = [], None, None
        for l in range(L):
            c, h, z = state[l]
            h_above = state[l + 1][1] if l + 1 < L else None
            s = _preactivation(params, config, l, b0, h, z, h_above, h_below, z_below)
            c, h = _cell(config, s, sizes[l], c, h, z, z_below)
            if l + 1 < L:
                z = straight_through_step(s[:, 4 * sizes[l]:], config.slope)
            new.append((c, h, z))
            h_below, z_below = h, z
        return tuple(new), tuple(h for _, h, _ in new)

    new_state, hs = jax.lax.scan(step, tuple(state), bottom0)               # hs[l]: (T, B, H_l)
    flat = [h.reshape(T * B, -1) for h in hs]
    gates = jax.nn.sigmoid(jnp.concatenate(flat, axis=1) @ params["gate_W"] + params["gate_b"])
    gated = jnp.concatenate([gates[:, l:l + 1] * h for l, h in enumerate(flat)], axis=1)
    mixed = jax.nn.relu(gated @ params["embed_W"] + params["embed_b"])
    logits = mixed @ params["out_W"] + params["out_b"]
    y = targets.T.reshape(-1)
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(logp, y[:, None], axis=1).mean(), jax.lax.stop_gradient(new_state)


def adam_init(params):
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    return zeros, jax.tree_util.tree_map(jnp.zeros_like, params), jnp.zeros((), jnp.int32)


def make_step(config: Config, lr: float = 0.002, max_norm: float = 1.0, b1=0.9, b2=0.999, eps=1e-8):
    """The jitted step ``(params, opt_state, tokens, targets, state) -> (params, opt_state, loss)``;
    ``params`` and ``opt_state`` (from `adam_init`) are donated."""

    def step(params, opt_state, tokens, targets, state):
        value, grads = jax.value_and_grad(loss, has_aux=True)(params, config, tokens, targets, state)
        leaves = jax.tree_util.tree_leaves(grads)
        norm = jnp.sqrt(sum(jnp.sum(g * g) for g in leaves))
        factor = jnp.where(norm > max_norm, max_norm / norm, 1.0)
        m, v, t = opt_state
        t = t + 1
        tree_map = jax.tree_util.tree_map
        m = tree_map(lambda m, g: b1 * m + (1 - b1) * (g * factor), m, grads)
        v = tree_map(lambda v, g: b2 * v + (1 - b2) * (g * factor) ** 2, v, grads)
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        params = tree_map(lambda p, m, v: p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps), params, m, v)
        return params, (m, v, t), value[0]

    return jax.jit(step, donate_argnums=(0, 1))
