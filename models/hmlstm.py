"""Hierarchical Multiscale LSTM language model (Chung, Ahn and Bengio, ICLR 2017, arXiv 1609.01704).

Layers ``l = 1..L`` run bottom to top at every step. Layer ``l`` sees its own ``c, h, z`` from ``t-1``,
``h`` and ``z`` of the layer below at ``t`` (the embedding is layer 0 with ``z = 1``) and ``h`` of the
layer above at ``t-1``. Its pre-activation is one affine map with ``4H + 1`` columns,

    s = U h_l(t-1)  +  z_l(t-1) * U_top h_{l+1}(t-1)  +  z_{l-1}(t) * W h_{l-1}(t)  +  b

(recurrent term never gated; top-down only after a flush; bottom-up only when the layer below fired),
split into the gates ``f, i, o, g`` and the boundary pre-activation. The cell update has three
operations, FLUSH / COPY / UPDATE, chosen per element by ``z`` (`models.cells`: the paper's blend, or
real branches), and the boundary ``z`` is a step function trained with the straight-through estimator.
Defaults follow the authors' code where the paper is silent: ``z`` is recomputed on every step, COPY
copies both ``c`` and ``h`` in every layer including the top one, and the top layer has no boundary
detector (its ``z`` is always 0) and no top-down input.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

import minflux as mf

from .boundaries import MIN_LAYERS
from .cells import detect_boundary, hm_update, hm_update_blend
from .output import GatedOutput

CELL_FORMS = {"branch": hm_update, "blend": hm_update_blend}
INITS = ("independent", "authors")


def block(rng: np.random.Generator, rows: int, columns: int, dtype) -> np.ndarray:
    """One ``(rows, columns)`` block: orthogonal where square, Glorot uniform otherwise."""
    init = mf.nn.init
    if rows == columns:
        return init.orthogonal(rng, rows, columns, dtype=dtype)
    return init.glorot_uniform(rng, rows, columns, dtype=dtype)


def recurrent_init(rng: np.random.Generator, rows: int, hidden: int, columns: int, dtype) -> np.ndarray:
    """A ``(rows, columns)`` weight: orthogonal ``hidden x hidden`` blocks where square, Glorot otherwise."""
    init = mf.nn.init
    if rows != hidden:
        return init.glorot_uniform(rng, rows, columns, dtype=dtype)
    blocks = [init.orthogonal(rng, hidden, hidden, dtype=dtype) for _ in range(columns // hidden)]
    if columns % hidden:
        blocks.append(init.glorot_uniform(rng, rows, columns % hidden, dtype=dtype))
    return np.concatenate(blocks, axis=1)


def replicated_init(rng: np.random.Generator, rows: int, hidden: int, boundary_column: bool,
                    dtype) -> np.ndarray:
    """The authors' scheme: one ``(rows, hidden)`` `block` repeated for the four gates ``f, i, o, g``,
    then (with ``boundary_column``) the boundary detector's own ``(rows, 1)`` Glorot column.

    >>> w = replicated_init(np.random.default_rng(0), 3, 2, True, np.float64)
    >>> w.shape, bool(np.array_equal(w[:, :2], w[:, 6:8]))
    ((3, 9), True)
    """
    gates = np.tile(block(rng, rows, hidden, dtype), (1, 4))
    if not boundary_column:
        return gates
    return np.concatenate([gates, mf.nn.init.glorot_uniform(rng, rows, 1, dtype=dtype)], axis=1)


def _value(x):
    """The array of ``x``: a Tensor's value (read as a constant), anything else as it is."""
    return x.value if isinstance(x, mf.Tensor) else x


class HMLSTMLayer(mf.nn.Module):
    """One HM-LSTM layer's weights: recurrent ``U``, top-down ``U_top``, bottom-up ``W`` and bias ``b``.

    >>> import numpy as np
    >>> layer = HMLSTMLayer(8, 4, 4, rng=np.random.default_rng(0))
    >>> layer.U.shape, layer.W.shape, layer.U_top.shape
    ((4, 17), (8, 17), (4, 17))
    """

    def __init__(self, below: int, hidden: int, above: int | None, *, layer_norm: bool = False,
                 init: str = "authors", rng: np.random.Generator, dtype=None):
        if init not in INITS:
            raise ValueError(f"init must be one of {', '.join(map(repr, INITS))}, got {init!r}")
        self.hidden = hidden
        self.has_boundary = above is not None
        width = 4 * hidden + (1 if self.has_boundary else 0)
        if init == "authors":
            self.U = replicated_init(rng, hidden, hidden, self.has_boundary, dtype)
            self.W = replicated_init(rng, below, hidden, self.has_boundary, dtype)
            self.U_top = None if above is None else (
                self.U.copy() if above == hidden else replicated_init(rng, above, hidden, True, dtype))
        else:
            self.U = recurrent_init(rng, hidden, hidden, width, dtype)
            self.W = mf.nn.init.glorot_uniform(rng, below, width, dtype=dtype)
            self.U_top = None if above is None else recurrent_init(rng, above, hidden, width, dtype)
        self.b = mf.nn.init.zeros(None, width, dtype=self.U.dtype)
        self.norms = None
        if layer_norm:
            self.norms = [mf.nn.LayerNorm(width, dtype=self.U.dtype) for _ in range(3)]

    def bottom_up(self, h_below):
        """``W h_below``, layer-normalised when enabled (before ``z`` gates it)."""
        term = h_below @ self.W
        return self.norms[2](term) if self.norms else term

    def stacked_weights(self, bottom: bool):
        """``[U; U_top; W; b]`` as one matrix (without ``W`` and ``b`` for the ``bottom`` layer, whose
        bottom-up term is computed for the whole segment at once), for `step`'s single product, made
        once per segment."""
        blocks = [self.U] + ([self.U_top] if self.U_top is not None else [])
        if not bottom:
            blocks += [self.W, mf.reshape(self.b, (1, -1))]
        stacked = mf.concatenate(blocks, axis=0)
        return stacked

    def step(self, c, h, z, h_above, below, z_below, slope: float, cell, mode: str, *, bottom: bool,
             stacked=None):
        """One time step: returns the new ``(c, h, z)``.

        ``below`` is the bottom-up input: ``h`` of the layer below, or for the ``bottom`` layer its
        term computed for the whole segment by the caller (``W x + b``, or normalised ``W x`` with layer
        norm). Without layer norm the pre-activation is one product of the concatenated input
        ``[h, z h_above, z_below h_below, 1]`` with ``stacked`` (`stacked_weights`): gating an input
        row by ``z`` before the product equals gating the product's row, in value and in gradient.
        """
        if self.norms:
            below = below if bottom else self.bottom_up(below)
            parts = self._split(self._normalised_preactivation(h, z, h_above, below, z_below))
        else:
            inputs = [h] + ([z * h_above] if self.U_top is not None else [])
            if bottom:
                parts = self._split(mf.concatenate(inputs, axis=-1) @ stacked + below)
            else:
                ones = mf.get_array_module(self.b).ones((h.shape[0], 1), dtype=self.b.dtype)
                x = mf.concatenate(inputs + [z_below * below, ones], axis=-1)
                if cell is hm_update:  # COPY rows (z = z_below = 0) never read their gates
                    updating = mf.logical_or(z != 0, z_below != 0)
                    parts = self._split(mf.row_masked_matmul(x, stacked, updating, 4 * self.hidden))
                else:
                    parts = self._split(x @ stacked)
        return self._update(cell, mode, slope, c, h, z, z_below, *parts)

    def _split(self, s):
        """The gates ``f, i, o, g`` and the boundary pre-activation (None without a detector)."""
        H = self.hidden
        if self.has_boundary:
            return mf.split(s, [H, 2 * H, 3 * H, 4 * H], axis=-1)
        return (*mf.split(s, 4, axis=-1), None)

    def _update(self, cell, mode, slope, c, h, z, z_below, f, i, o, g, s_z):
        c_new, h_new = mf.broadcast(cell, z, z_below, c, h, f, i, o, g, mode=mode)
        z_new = mf.broadcast(detect_boundary, s_z, slope, mode=mode) if s_z is not None else z
        return c_new, h_new, z_new

    def _normalised_preactivation(self, h, z, h_above, bottom_up, z_below):
        s = self.norms[0](h @ self.U) + z_below * bottom_up + self.b
        if self.U_top is not None:
            s = s + z * self.norms[1](h_above @ self.U_top)
        return s


class HMLSTM(mf.nn.Module):
    """The HM-LSTM character language model: embedding, ``L`` HM-LSTM layers, gated output module.

    ``model(tokens, state)`` takes ``(B, T)`` integer tokens and the state from `initial_state` (or
    the previous segment) and returns ``(logits (B, T, V), new_state, boundaries (B, T, L-1))``;
    ``model(tokens, state, slope=a)`` uses slope ``a`` (a number or a 0-d array) instead of ``slope``.
    ``slope`` is the hard sigmoid's slope ``a`` of the straight-through estimator (anneal it with
    `models.annealed_slope`); ``cell_form`` picks the cell update: ``"blend"`` (the default) is the
    paper's equations multiplied out, so the straight-through gradient reaches ``z`` through the choice
    of operation as well as through the gates; ``"branch"`` takes real branches and gives ``z``
    gradient only through the gates, which pushes a detector toward firing on every step (the cost of
    flushing a memory, or of not updating the layer above, is invisible to it); in our runs it keeps a
    healthy hierarchy with layer normalisation. ``mode`` is the broadcast mode of the elementwise
    kernels (``"mixed"`` or the pure reverse-mode ``"reverse"``).

    ``init`` chooses the layers' weights. ``"authors"`` (the default) is the scheme of the authors'
    code: in ``W``, ``U`` and ``U_top`` one block (orthogonal where square, Glorot uniform otherwise)
    repeated for the four gates, the boundary detector's column its own ``(n_in, 1)`` Glorot column,
    and ``U_top`` a copy of ``U``. ``"independent"`` draws every gate block on its own, and the boundary
    column as one more column of a Glorot matrix ``(n_in, 4H + 1)``, which makes the detector's input
    from below four times smaller: with it the detector's pre-activations start in a narrow band that
    the first few Adam steps can push wholly outside the straight-through window ``|x| < 1 / a``, after
    which the detector never fires again (or always fires). The embedding is ``N(0, 1)``
    (`minflux.nn.Embedding`'s default, as in most character models); a Glorot-scaled embedding also
    shrinks the detector's input from below and trains more slowly.

    >>> import numpy as np
    >>> model = HMLSTM(11, embed_size=6, hidden_sizes=(5, 4), rng=np.random.default_rng(0))
    >>> logits, state, z = model(np.zeros((2, 3), np.int64), model.initial_state(2))
    >>> logits.shape, z.shape
    ((2, 3, 11), (2, 3, 1))
    """

    def __init__(self, vocab_size: int, *, embed_size: int = 128, hidden_sizes: Sequence[int] = (512, 512, 512),
                 output_embed_size: int | None = None, layer_norm: bool = False, cell_form: str = "blend",
                 slope: float = 1.0, mode: str = "mixed", init: str = "authors", rng: np.random.Generator,
                 dtype=None):
        if cell_form not in CELL_FORMS:
            raise ValueError(f"cell_form must be one of {sorted(CELL_FORMS)}, got {cell_form!r}")
        if len(hidden_sizes) < MIN_LAYERS:
            raise ValueError(f"an HM-LSTM needs at least {MIN_LAYERS} layers (hidden_sizes = [n, n, ...]); "
                             f"with {len(hidden_sizes)} it has no boundary detector (use the LSTM)")
        self.vocab_size = vocab_size
        self.cell_form, self.slope, self.mode = cell_form, float(slope), mode
        self.embed = mf.nn.Embedding(vocab_size, embed_size, rng=rng, dtype=dtype)
        sizes = list(hidden_sizes)
        below = [embed_size] + sizes[:-1]
        above = sizes[1:] + [None]
        self.layers = [HMLSTMLayer(b, h, a, layer_norm=layer_norm, init=init, rng=rng, dtype=dtype)
                       for b, h, a in zip(below, sizes, above)]
        self.output = GatedOutput(sizes, output_embed_size or max(sizes), vocab_size, rng=rng, dtype=dtype)

    def initial_state(self, batch_size: int) -> list[dict]:
        """Zero ``c``, ``h`` (``(B, H)``) and ``z`` (``(B, 1)``) for every layer."""
        xp = mf.get_array_module(self.embed.W)
        dtype = self.embed.W.dtype
        return [{"c": xp.zeros((batch_size, layer.hidden), dtype), "h": xp.zeros((batch_size, layer.hidden), dtype),
                 "z": xp.zeros((batch_size, 1), dtype)} for layer in self.layers]

    def __call__(self, tokens, state: list[dict], slope=None):
        slope = self.slope if slope is None else slope
        cell = CELL_FORMS[self.cell_form]
        embedded = self.embed(tokens)
        bottom = self.layers[0]
        if bottom.norms:
            first_inputs = mf.unstack(bottom.bottom_up(embedded), axis=1)
            stacked = [None] * len(self.layers)
        else:
            first_inputs = mf.unstack(embedded @ bottom.W + bottom.b, axis=1)
            stacked = [layer.stacked_weights(bottom=l == 0) for l, layer in enumerate(self.layers)]
        states = [(s["c"], s["h"], s["z"]) for s in state]
        hidden_steps = [[] for _ in self.layers]
        boundary_steps = []
        for bottom_up0 in first_inputs:
            new_states = []
            h_below, z_below = None, 1.0
            for l, layer in enumerate(self.layers):
                c, h, z = states[l]
                h_above = states[l + 1][1] if l + 1 < len(self.layers) else None
                below = bottom_up0 if l == 0 else h_below
                c, h, z = layer.step(c, h, z, h_above, below, z_below, slope, cell, self.mode,
                                     bottom=l == 0, stacked=stacked[l])
                new_states.append((c, h, z))
                hidden_steps[l].append(h)
                h_below, z_below = h, z
            states = new_states
            boundary_steps.append([_value(z) for _, _, z in states[:-1]])
        logits = self.output([mf.stack(hs, axis=1) for hs in hidden_steps])
        new_state = [{"c": c, "h": h, "z": z} for c, h, z in states]
        xp = mf.get_array_module(self.embed.W)
        boundaries = xp.stack([xp.concatenate(step, axis=-1) for step in boundary_steps], axis=1)
        return logits, new_state, boundaries
