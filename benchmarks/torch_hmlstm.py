"""The HM-LSTM language model written in PyTorch eager with the same math as `models.HMLSTM`.

Used only as a speed peer by the benchmarks; the cell update's branches become a `torch.where` chain.
"""
from __future__ import annotations

import torch
from torch import nn


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
        window = (x.abs() * ctx.slope < 1).to(grad.dtype)
        return grad * window * (ctx.slope / 2), None


class TorchHMLSTM(nn.Module):
    def __init__(self, vocab: int, embed: int, hidden: int, layers: int, slope: float = 1.0):
        super().__init__()
        self.hidden, self.layers, self.slope = hidden, layers, slope
        self.embed = nn.Embedding(vocab, embed)
        width = [4 * hidden + (1 if l < layers - 1 else 0) for l in range(layers)]
        below = [embed] + [hidden] * (layers - 1)
        self.U = nn.ParameterList([nn.Parameter(torch.randn(hidden, w) * hidden ** -0.5) for w in width])
        self.W = nn.ParameterList([nn.Parameter(torch.randn(b, w) * b ** -0.5) for b, w in zip(below, width)])
        self.U_top = nn.ParameterList([nn.Parameter(torch.randn(hidden, w) * hidden ** -0.5) for w in width[:-1]])
        self.b = nn.ParameterList([nn.Parameter(torch.zeros(w)) for w in width])
        self.gate = nn.Linear(hidden * layers, layers)
        self.mix = nn.ParameterList([nn.Parameter(torch.randn(hidden, hidden) * hidden ** -0.5) for _ in range(layers)])
        self.mix_b = nn.Parameter(torch.zeros(hidden))
        self.out = nn.Linear(hidden, vocab)

    def forward(self, tokens):
        B, T = tokens.shape
        H, L = self.hidden, self.layers
        bottom0 = self.embed(tokens) @ self.W[0]
        c = [bottom0.new_zeros(B, H) for _ in range(L)]
        h = [bottom0.new_zeros(B, H) for _ in range(L)]
        z = [bottom0.new_zeros(B, 1) for _ in range(L)]
        hs = [[] for _ in range(L)]
        for t in range(T):
            h_below, z_below = None, bottom0.new_ones(B, 1)
            new = []
            for l in range(L):
                bottom = bottom0[:, t] if l == 0 else h_below @ self.W[l]
                s = h[l] @ self.U[l] + z_below * bottom + self.b[l]
                if l < L - 1:
                    s = s + z[l] * (h[l + 1] @ self.U_top[l])
                f, i, o, g = (s[:, k * H:(k + 1) * H] for k in range(4))
                flush = torch.sigmoid(i) * torch.tanh(g)
                update = torch.sigmoid(f) * c[l] + flush
                c_new = torch.where(z[l] == 1, flush, torch.where(z_below == 0, c[l], update))
                changed = (z[l] == 1) | (z_below == 1)
                h_new = torch.where(changed, torch.sigmoid(o) * torch.tanh(c_new), h[l])
                z_new = StraightThroughStep.apply(s[:, 4 * H:], self.slope) if l < L - 1 else z[l]
                new.append((c_new, h_new, z_new))
                hs[l].append(h_new)
                h_below, z_below = h_new, z_new
            c, h, z = (list(v) for v in zip(*new))
        seq = [torch.stack(v, dim=1) for v in hs]
        gates = torch.sigmoid(self.gate(torch.cat(seq, dim=-1)))
        mixed = self.mix_b + sum(gates[..., l:l + 1] * (seq[l] @ self.mix[l]) for l in range(L))
        return self.out(torch.relu(mixed))
