"""Measure the weights of the AD-mode cost model (`minflux.compiler.cost`) on this machine.

Each primitive's weight is the time of one call per element in a compute-bound float32 kernel (a
``(256, 256)`` array, in cache) divided by the time of one ``add``: the kernel evaluates the
primitive on eight scaled copies of its input and sums them, and the same sum without the primitive
is subtracted. The weight of an output stream is the time per element of writing one more output
of a ``(1024, 1024)`` kernel (out of cache), in the same ``add`` units. Single-threaded, medians.

    python benchmarks/cost_weights.py     # writes benchmarks/results/cost_weights.{json,md}
"""
from __future__ import annotations

import os

for _var in ("MINFLUX_NUM_THREADS", "NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import markdown_table, median_time, source_module, write_results  # noqa: E402

TERMS = 8
UNARY = ("exp", "log", "tanh", "sigmoid", "log1p", "expm1", "softplus", "sqrt", "sin", "cos", "tan",
         "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log2", "log10", "erf")
BINARY = {"divide": "({a} / {b})", "power": "({a} ** {b})", "mod": "({a} % {b})",
          "floor_divide": "({a} // {b})", "atan2": "mf.atan2({a}, {b})", "hypot": "mf.hypot({a}, {b})",
          "multiply": "({a} * {b})", "maximum": "mf.maximum({a}, {b})"}
IN_UNIT_INTERVAL = {"asin", "acos", "atanh"}


def kernel(name: str, term: str):
    source = f"import minflux as mf\n\ndef f(x):\n    return {' + '.join(term.format(k=k) for k in range(TERMS))}\n"
    return source_module(f"cost_weight_{name}", source).f


def term(op: str) -> str:
    a = "(x * 0.0{k}1)" if op in IN_UNIT_INTERVAL else "(x * 0.1{k} + 1.0)"
    if op in BINARY:
        return BINARY[op].format(a=a, b="(x + 0.5)")
    return f"mf.{op}({a})" if op != "none" else a


def per_element_ns(fn, x, repeats: int) -> float:
    import minflux as mf

    mf.broadcast(fn, x)
    return median_time(lambda: mf.broadcast(fn, x), repeats=repeats, warmup=2) * 1e9 / x.size


def streams_ns(repeats: int) -> float:
    """Nanoseconds per element of one more output stream, out of cache."""
    x = np.random.default_rng(1).random((1024, 1024)).astype(np.float32)
    one = source_module("cost_weight_out1", "def f(x):\n    return x * 0.5\n").f
    five = source_module("cost_weight_out5", "def f(x):\n    return (x * 0.5, x * 0.25, x * 0.125, "
                                             "x * 0.0625, x * 0.03125)\n").f
    return (per_element_ns(five, x, repeats) - per_element_ns(one, x, repeats)) / 4


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=31)
    args = parser.parse_args(argv)
    x = np.random.default_rng(0).uniform(0.5, 1.0, (256, 256)).astype(np.float32)
    base = per_element_ns(kernel("none", term("none")), x, args.repeats)
    add = (base - per_element_ns(kernel("one", "(x * 0.1{k})"), x, args.repeats) / 1) / TERMS
    add = max(add, 1e-3)
    ns = {}
    for op in UNARY + tuple(BINARY):
        ns[op] = (per_element_ns(kernel(op, term(op)), x, args.repeats) - base) / TERMS
        print(f"{op}: {ns[op]:.3f} ns per element, {ns[op] / add:.1f} adds", file=sys.stderr, flush=True)
    stream = streams_ns(max(5, args.repeats // 3))
    weights = {op: round(max(v / add, 1.0), 1) for op, v in ns.items()}
    data = {"benchmark": "cost_weights", "add_ns": add, "ns": ns, "weights": weights,
            "output_stream_ns": stream, "output_stream_weight": round(stream / add, 1),
            "command": "python benchmarks/cost_weights.py"}
    rows = [[op, f"{ns[op]:.3f}", weights[op]] for op in ns]
    rows.append(["one more output stream (1024x1024)", f"{stream:.3f}", data["output_stream_weight"]])
    text = (f"Cost of one primitive call per element in a float32 numba kernel, single-threaded, and its "
            f"weight in units of one add ({add:.4f} ns) (`python benchmarks/cost_weights.py`).\n\n"
            + markdown_table(["primitive", "ns per element", "weight (adds)"], rows))
    write_results("cost_weights", data, text)
    return data


if __name__ == "__main__":
    main()
