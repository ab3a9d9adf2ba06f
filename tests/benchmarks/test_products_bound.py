"""`benchmarks/products_bound.py` times every command of a native form once, by kind, and its table of
where a one-core step's time goes adds up to the step."""
import sys
from pathlib import Path

import numpy as np
import pytest

import minflux as mf
from minflux.runtime import native_runner_ir as ir
from tests.compiled.test_native_replay import compile_after_five_replays, native_form  # noqa: F401

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import products_bound  # noqa: E402


def folded(x):
    return x * x if x > 0 else -x


def product_kernel_tanh(a, b):
    return mf.sum(mf.tanh(mf.broadcast(folded, mf.matmul(a, b))))


def test_every_command_of_a_native_form_is_timed_once_under_its_kind():
    rng = np.random.default_rng(0)
    step = mf.compile(product_kernel_tanh)
    for _ in range(10):
        step(rng.normal(size=(6, 5)).astype(np.float32), rng.normal(size=(5, 7)).astype(np.float32))
    form = native_form(step)
    assert form is not None and (form.n_products, form.n_kernels, form.n_commands) == (1, 1, 4)
    timed = products_bound._commands_alone(form, 2)
    assert timed["counts"] == {"products": 1, "kernels": 1, "copies": 0, "elementwise and sums": 1,
                               "numpy loops": 1, "bookkeeping": 0}
    assert timed["empty_call"] > 0 and all(seconds >= 0 for seconds in timed["seconds"].values())


@pytest.mark.parametrize("tag, kind", [
    (ir.KERNEL, "kernels"), (ir.GEMM, "products"), (ir.GEMM + len(ir.GEMM_VARIANTS) - 1, "products"),
    (ir.COPY, "copies"), (ir.MAP, "elementwise and sums"), (ir.SUM, "elementwise and sums"),
    (ir.INTEGER_MAP, "elementwise and sums"), (ir.POWERS, "bookkeeping"), (ir.ROWS_CHECK, "bookkeeping"),
    (ir.ZERO_ROWS, "bookkeeping"), (ir.PREDICATE, "elementwise and sums"), (ir.LOGICAL_MAP, "elementwise and sums"),
    (ir.LOOP, "numpy loops")])
def test_each_runner_tag_has_its_kind(tag, kind):
    assert products_bound._command_kind(tag) == kind


def test_the_parts_table_has_one_core_rows_whose_rest_is_what_the_parts_leave():
    seconds = dict.fromkeys(products_bound.COMMAND_KINDS, 0.001)
    counts = dict.fromkeys(products_bound.COMMAND_KINDS, 3)
    one = {"samples": [[0.010, 0.010], [0.012, 0.012], [0.011, 0.011]], "seconds": 0.008, "multiply_adds": 10**9,
           "products": 3, "parts": {"guard": 0.0005, "python products": 0.0015},
           "commands": {"seconds": seconds, "counts": counts}, "python_statements": 40}
    every = {key: one[key] for key in ("samples", "seconds", "multiply_adds", "products", "parts")}
    text = products_bound.table({"cases": {"small": {"one": one, "all": every}}, "cores": 2, "steps": 3,
                                 "repeats": 2})
    rows = [line for line in text.splitlines() if line.startswith("| small |")]
    assert len(rows) == 3 and sum("all cores" in row for row in rows) == 1   # the second table: one core only
    cells = [cell.strip() for cell in rows[-1].strip("|").split("|")]
    assert cells[:4] == ["small", "one core", "11.0", "1.0 (3)"]
    assert cells[-4:] == ["1.5", "0.5", "40", "3.0"]   # 11 ms less six kinds of 1 ms, 1.5 and 0.5
