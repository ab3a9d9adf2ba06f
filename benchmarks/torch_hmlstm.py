"""`models.HMLSTM` in PyTorch eager, written the way a performance-minded PyTorch user writes it.

A speed peer for the benchmarks, with the same math as `models.HMLSTM` (the branch and the blend
cell update, optional layer norm) and built from a minflux model's weights (`TorchHMLSTM.from_minflux`)
so both start from the same point. What makes it fast in eager mode:

- per layer and time step one ``addmm`` over the concatenated input ``[h, z * h_above, z_below *
  h_below]`` against the stacked weight ``[U; U_top; W]`` (gating the inputs gives the same value and
  the same gradient to ``z`` as gating the products);
- the bottom layer's input projection (and its bias) for the whole segment in one matmul, split with
  ``unbind``; time-major layout so every step's slice is contiguous;
- one ``sigmoid`` over the three sigmoid gates; the cell update as a ``torch.where`` chain on the
  detached boundaries (branch form: no gradient to ``z`` through the update, as in minflux);
- the output module's per-layer products ``sum_l g_l (h_l W_l)`` as one ``addmm`` over
  ``[g_1 h_1, ..., g_L h_L]``;
- `torch.nn.utils.clip_grad_norm_` (foreach) and `torch.optim.Adam` (foreach) in `make_step`.

With layer norm the three products are normalised separately (as in the model), so they stay
three products per step; the bottom layer's projection still covers the whole segment.

    >>> import numpy as np, torch
    >>> from models import HMLSTM
    >>> peer = TorchHMLSTM.from_minflux(HMLSTM(11, embed_size=6, hidden_sizes=(5, 4),
    ...                                        rng=np.random.default_rng(0)))
    >>> logits, state = peer(torch.zeros(2, 3, dtype=torch.long))
    >>> tuple(logits.shape)
    (3, 2, 11)
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


class StraightThroughStep(torch.autograd.Function):
    """z = 1 where x > 0; backward the hard sigmoid's slope (slope / 2 where |x| < 1 / slope)."""

    @staticmethod
    def forward(ctx, x, slope):
        ctx.save_for_backward(x)
        ctx.slope = slope
        return (x > 0).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return torch.where(x.abs() * ctx.slope < 1, grad * (ctx.slope / 2), 0.0), None


def _param(array) -> nn.Parameter:
    return nn.Parameter(torch.from_numpy(np.array(array, copy=True)))


class TorchHMLSTM(nn.Module):
    """The HM-LSTM language model; ``forward(tokens (B, T), state)`` returns time-major logits
    ``(T, B, V)`` and the detached new state (a list of ``(c, h, z)``). Build it with `from_minflux`."""

    def __init__(self, vocab: int, embed: int, hidden_sizes, output_embed: int, *, layer_norm: bool = False,
                 cell_form: str = "branch", slope: float = 1.0, dtype=torch.float32):
        super().__init__()
        if cell_form not in ("branch", "blend"):
            raise ValueError(f"cell_form must be 'branch' or 'blend', got {cell_form!r}")
        sizes = list(hidden_sizes)
        self.sizes, self.cell_form, self.slope, self.layer_norm = sizes, cell_form, float(slope), layer_norm
        L = len(sizes)
        below = [embed] + sizes[:-1]
        above = sizes[1:] + [0]
        width = [4 * h + (1 if l < L - 1 else 0) for l, h in enumerate(sizes)]
        self.embed = nn.Parameter(torch.zeros(vocab, embed, dtype=dtype))
        # Rows [U; U_top; W] for layers above the first, [U; U_top] plus a separate W0 for the first.
        self.W0 = nn.Parameter(torch.zeros(embed, width[0], dtype=dtype))
        self.weight = nn.ParameterList(
            nn.Parameter(torch.zeros(h + a + (b if l else 0), w, dtype=dtype))
            for l, (h, a, b, w) in enumerate(zip(sizes, above, below, width)))
        self.bias = nn.ParameterList(nn.Parameter(torch.zeros(w, dtype=dtype)) for w in width)
        self.norms = None
        if layer_norm:
            self.norms = nn.ModuleList(nn.ModuleList(nn.LayerNorm(w, eps=1e-5, dtype=dtype) for _ in range(3))
                                       for w in width)
        self.gate_W = nn.Parameter(torch.zeros(sum(sizes), L, dtype=dtype))
        self.gate_b = nn.Parameter(torch.zeros(L, dtype=dtype))
        self.embed_W = nn.Parameter(torch.zeros(sum(sizes), output_embed, dtype=dtype))
        self.embed_b = nn.Parameter(torch.zeros(output_embed, dtype=dtype))
        self.out_W = nn.Parameter(torch.zeros(output_embed, vocab, dtype=dtype))
        self.out_b = nn.Parameter(torch.zeros(vocab, dtype=dtype))

    @classmethod
    def from_minflux(cls, model) -> "TorchHMLSTM":
        """A peer holding copies of the weights of ``model`` (a `models.HMLSTM` on the CPU)."""
        layers, out = model.layers, model.output
        dtype = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}[model.embed.W.dtype]
        peer = cls(model.vocab_size, model.embed.W.shape[1], [l.hidden for l in layers], out.out_W.shape[0],
                   layer_norm=layers[0].norms is not None, cell_form=model.cell_form, slope=model.slope, dtype=dtype)
        with torch.no_grad():
            peer.embed.copy_(torch.from_numpy(model.embed.W))
            peer.W0.copy_(torch.from_numpy(layers[0].W))
            for l, layer in enumerate(layers):
                rows = [layer.U] + ([layer.U_top] if layer.U_top is not None else []) + ([layer.W] if l else [])
                peer.weight[l].copy_(torch.from_numpy(np.concatenate(rows, axis=0)))
                peer.bias[l].copy_(torch.from_numpy(layer.b))
                if layer.norms:
                    for norm, theirs in zip(peer.norms[l], layer.norms):
                        norm.weight.copy_(torch.from_numpy(theirs.scale))
                        norm.bias.copy_(torch.from_numpy(theirs.shift))
            peer.gate_W.copy_(torch.from_numpy(out.gate_W))
            peer.gate_b.copy_(torch.from_numpy(out.gate_b))
            peer.embed_W.copy_(torch.from_numpy(np.concatenate(out.embed_W, axis=0)))
            peer.embed_b.copy_(torch.from_numpy(out.embed_b))
            peer.out_W.copy_(torch.from_numpy(out.out_W))
            peer.out_b.copy_(torch.from_numpy(out.out_b))
        return peer

    def minflux_gradients(self) -> dict:
        """The ``.grad`` of every weight, split back into `models.HMLSTM`'s names (numpy arrays)."""
        def np_(t):
            return None if t is None else t.detach().cpu().numpy()

        sizes, L = self.sizes, len(self.sizes)
        grads = {"embed.W": np_(self.embed.grad), "layers.0.W": np_(self.W0.grad),
                 "output.gate_W": np_(self.gate_W.grad), "output.gate_b": np_(self.gate_b.grad),
                 "output.embed_b": np_(self.embed_b.grad), "output.out_W": np_(self.out_W.grad),
                 "output.out_b": np_(self.out_b.grad)}
        for l, h in enumerate(sizes):
            parts = ["U"] + (["U_top"] if l < L - 1 else []) + (["W"] if l else [])
            rows = [h] + ([sizes[l + 1]] if l < L - 1 else []) + ([sizes[l - 1]] if l else [])
            g = np_(self.weight[l].grad)
            blocks = np.split(g, np.cumsum(rows)[:-1], axis=0) if g is not None else [None] * len(parts)
            grads.update((f"layers.{l}.{name}", block) for name, block in zip(parts, blocks))
            grads[f"layers.{l}.b"] = np_(self.bias[l].grad)
            if self.norms is not None:
                for k, norm in enumerate(self.norms[l]):
                    grads[f"layers.{l}.norms.{k}.scale"] = np_(norm.weight.grad)
                    grads[f"layers.{l}.norms.{k}.shift"] = np_(norm.bias.grad)
        for l, block in enumerate(np.split(np_(self.embed_W.grad), np.cumsum(sizes)[:-1], axis=0)):
            grads[f"output.embed_W.{l}"] = block
        return grads

    def initial_state(self, batch: int) -> list:
        """Zero ``(c, h, z)`` for every layer."""
        p = self.embed
        return [(p.new_zeros(batch, h), p.new_zeros(batch, h), p.new_zeros(batch, 1)) for h in self.sizes]

    def _cell(self, s, H, c, h, z, z_below):
        sig = torch.sigmoid(s[:, :3 * H])
        f, i, o = sig[:, :H], sig[:, H:2 * H], sig[:, 2 * H:]
        ig = i * torch.tanh(s[:, 3 * H:4 * H])
        zd = z.detach()
        if self.cell_form == "blend":  # the paper's blend: h from the blended c
            c_update = torch.addcmul(ig, f, c)
            if z_below is None:  # the first layer: the embedding always fires
                c_new = z * ig + (1 - z) * c_update
                return c_new, o * torch.tanh(c_new)
            copy = (1 - z) * (1 - z_below)
            c_new = z * ig + (1 - z) * z_below * c_update + copy * c
            return c_new, (1 - copy) * o * torch.tanh(c_new) + copy * h
        flush = zd > 0
        if z_below is None:
            c_new = torch.where(flush, ig, torch.addcmul(ig, f, c))
            return c_new, o * torch.tanh(c_new)
        fired = z_below.detach() > 0
        c_new = torch.where(flush, ig, torch.where(fired, torch.addcmul(ig, f, c), c))
        return c_new, torch.where(flush | fired, o * torch.tanh(c_new), h)

    def _preactivation(self, l, bottom0, h, z, h_above, h_below, z_below):
        H = self.sizes[l]
        top = h_above is not None
        if self.norms is None:
            inputs = [h] + ([z * h_above] if top else []) + ([z_below * h_below] if l else [])
            return torch.addmm(bottom0 if l == 0 else self.bias[l], torch.cat(inputs, dim=1), self.weight[l])
        n, w = self.norms[l], self.weight[l]
        s = n[0](h @ w[:H])
        if top:
            s = s + z * n[1](h_above @ w[H:H + h_above.shape[1]])
        if l == 0:
            return s + bottom0
        return s + z_below * n[2](h_below @ w[w.shape[0] - h_below.shape[1]:]) + self.bias[l]

    def forward(self, tokens, state=None):
        B, T = tokens.shape
        L = len(self.sizes)
        state = list(state) if state is not None else self.initial_state(B)
        x = F.embedding(tokens.t(), self.embed).reshape(T * B, -1)
        if self.norms is None:
            bottom0 = torch.addmm(self.bias[0], x, self.W0)
        else:
            bottom0 = self.norms[0][2](x @ self.W0) + self.bias[0]
        hs = [[] for _ in range(L)]
        for b0 in bottom0.view(T, B, -1).unbind(0):
            new = []
            h_below = z_below = None
            for l in range(L):
                c, h, z = state[l]
                h_above = state[l + 1][1] if l + 1 < L else None
                s = self._preactivation(l, b0, h, z, h_above, h_below, z_below)
                c, h = self._cell(s, self.sizes[l], c, h, z, z_below)
                if l + 1 < L:
                    z = StraightThroughStep.apply(s[:, 4 * self.sizes[l]:], self.slope)
                new.append((c, h, z))
                hs[l].append(h)
                h_below, z_below = h, z
            state = new
        seq = [torch.stack(v) for v in hs]                                   # (T, B, H_l)
        gates = torch.sigmoid(torch.addmm(self.gate_b, torch.cat(seq, -1).view(T * B, -1), self.gate_W))
        gated = torch.cat([gates[:, l:l + 1] * s.view(T * B, -1) for l, s in enumerate(seq)], dim=1)
        mixed = torch.relu(torch.addmm(self.embed_b, gated, self.embed_W))
        logits = torch.addmm(self.out_b, mixed, self.out_W).view(T, B, -1)
        return logits, [tuple(v.detach() for v in s) for s in state]

    def loss(self, tokens, targets, state=None):
        """Mean cross-entropy per character of predicting ``targets (B, T)``, and the new state."""
        logits, new_state = self(tokens, state)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.t().reshape(-1)), new_state


def make_step(model: TorchHMLSTM, tokens, targets, state=None, lr: float = 0.002):
    """One training step as a closure: forward, backward, ``clip_grad_norm_(1)``, Adam (foreach)."""
    opt = torch.optim.Adam(model.parameters(), lr=lr, foreach=True)
    params = [p for p in model.parameters()]

    def step():
        opt.zero_grad(set_to_none=True)
        loss, _ = model.loss(tokens, targets, state)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        opt.step()
        return loss

    return step
