"""Single-precision matrix products at the HM-LSTM step's shapes, per GEMM library, one core and all.

Candidates, each loaded through its C interface when its wheel is installed: numpy's bundled
OpenBLAS (``np.matmul``), a newer OpenBLAS (``scipy-openblas32``), MKL's CBLAS (``mkl``, with its own
default threading), oneDNN's ``dnnl_sgemm`` (``onednn``) and BLIS (``blis``, single-threaded build);
and ``minflux``: `minflux.matrix_product.matmul` as a user gets it (MKL sequential when installed,
large products split over minflux's pool). Shapes, for both step sizes:
the forward product ``B x K @ K x 4H``, the input gradient ``B x 4H @ (K x 4H).T`` and the stacked
weight gradient ``(T B x K).T @ T B x 4H`` (transposed operands are passed as BLAS transposes, never
copied). Every library runs in its own process (`_own_process`: ``one`` pins it to one core with
every pool at 1; ``all`` leaves it at the machine's cores); each product is checked against numpy
before it is timed. GFLOP/s, median of repeats.

    python benchmarks/gemm_providers.py [--settings one,all] [--libraries numpy,openblas32,mkl,onednn,blis]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _own_process import cpu_per_wall, run_worker, timed  # noqa: E402

SHAPES = {  # name -> (M, K, N, a transposed, b transposed)
    "small forward 32x384 @ 384x512": (32, 384, 512, False, False),
    "small input grad 32x512 @ 512x384": (32, 512, 384, False, True),
    "small weight grad 384x1600 @ 1600x512": (384, 1600, 512, True, False),
    "ptb forward 64x1536 @ 1536x2048": (64, 1536, 2048, False, False),
    "ptb input grad 64x2048 @ 2048x1536": (64, 2048, 1536, False, True),
    "ptb weight grad 1536x6400 @ 6400x2048": (1536, 6400, 2048, True, False),
}
LIBRARIES = ("numpy", "openblas32", "mkl", "onednn", "blis", "minflux")


def _operand(a):
    """(transposed?, leading dimension) of a row-major view of ``a``, which must not need a copy."""
    if a.flags.c_contiguous:
        return False, a.shape[1]
    if a.flags.f_contiguous:
        return True, a.shape[0]
    raise ValueError("operand needs a copy")


def _cblas(function):
    function.restype = None

    def gemm(a, b, out):
        (ta, lda), (tb, ldb) = _operand(a), _operand(b)
        m, k = a.shape
        function(101, 112 if ta else 111, 112 if tb else 111, m, b.shape[1], k, ctypes.c_float(1.0),
                 a.ctypes.data_as(ctypes.c_void_p), lda, b.ctypes.data_as(ctypes.c_void_p), ldb,
                 ctypes.c_float(0.0), out.ctypes.data_as(ctypes.c_void_p), out.shape[1])
        return out
    return gemm


def provider(name: str):
    """``gemm(a, b, out)`` of library ``name`` (returning the product), or raise ImportError/OSError when it is not installed."""
    import numpy as np

    if name == "numpy":
        return lambda a, b, out: np.matmul(a, b, out=out)
    if name == "minflux":
        from minflux.matrix_product import matmul

        return lambda a, b, out: matmul(a, b)   # allocates its result, as every product in a step does
    if name == "openblas32":
        import scipy_openblas32

        lib = ctypes.CDLL(str(Path(scipy_openblas32.get_lib_dir()) / "libscipy_openblas.so"))
        return _cblas(lib.scipy_cblas_sgemm)
    if name == "mkl":
        lib = ctypes.CDLL(str(Path(sys.prefix) / "lib" / "libmkl_rt.so.3"))
        return _cblas(lib.cblas_sgemm)
    if name == "onednn":
        lib = ctypes.CDLL(str(Path(sys.prefix) / "lib" / "libdnnl.so.3"))
        f = lib.dnnl_sgemm
        f.argtypes = [ctypes.c_char, ctypes.c_char, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                      ctypes.c_float, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                      ctypes.c_float, ctypes.c_void_p, ctypes.c_int64]

        def gemm(a, b, out):
            (ta, lda), (tb, ldb) = _operand(a), _operand(b)
            status = f(b"T" if ta else b"N", b"T" if tb else b"N", a.shape[0], b.shape[1], a.shape[1], 1.0,
                       a.ctypes.data, lda, b.ctypes.data, ldb, 0.0, out.ctypes.data, out.shape[1])
            if status != 0:
                raise RuntimeError(f"dnnl_sgemm returned {status}")
            return out
        return gemm
    if name == "blis":
        from blis.py import gemm as blis_gemm

        def gemm(a, b, out):   # takes C-ordered operands and transpose flags
            ta, tb = _operand(a)[0], _operand(b)[0]
            blis_gemm(a.T if ta else a, b.T if tb else b, out=out, trans1=ta, trans2=tb, beta=0.0)
            return out
        return gemm
    raise ValueError(f"unknown library {name!r}")


CANDIDATE_WHEELS = ("scipy-openblas32", "mkl", "onednn", "blis")   # what openblas32, mkl, onednn, blis load


def _wheel_versions() -> str:
    """The version of each candidate library's wheel, or "not installed"."""
    import importlib.metadata

    found = []
    for wheel in CANDIDATE_WHEELS:
        try:
            found.append(f"{wheel} {importlib.metadata.version(wheel)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{wheel} not installed")
    return ", ".join(found)


def worker(setting: str, library: str) -> int:
    import numpy as np

    try:
        gemm = provider(library)
    except (ImportError, OSError, AttributeError) as e:
        print(json.dumps({"missing": str(e)}))
        return 0
    rng = np.random.default_rng(0)
    rates = {}
    for label, (m, k, n, ta, tb) in SHAPES.items():
        a = rng.standard_normal((k, m) if ta else (m, k), dtype=np.float32)
        b = rng.standard_normal((n, k) if tb else (k, n), dtype=np.float32)
        a, b = (a.T if ta else a), (b.T if tb else b)
        out = np.empty((m, n), np.float32)
        result = gemm(a, b, out)
        exact = a.astype(np.float64) @ b.astype(np.float64)
        if not np.allclose(result, exact, rtol=1e-4, atol=1e-3 * np.sqrt(k)):
            raise AssertionError(f"{library} computed a wrong product at {label}")
        samples = timed(lambda: gemm(a, b, out), max(5, int(2e9 / (2 * m * n * k))))
        rates[label] = {"gflops": 2 * m * n * k / statistics.median(w for w, _ in samples) / 1e9,
                        "cpu_per_wall": cpu_per_wall(samples)}
    print(json.dumps({"rates": rates}))
    return 0


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return worker(*sys.argv[2:])
    from _common import markdown_table, write_results

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", default="one,all")
    parser.add_argument("--libraries", default=",".join(LIBRARIES))
    args = parser.parse_args(argv)
    results, rows = {}, []
    for setting in args.settings.split(","):
        for library in args.libraries.split(","):
            # the MKL and oneDNN wheels put their shared libraries (and those they need) in the prefix's lib
            out = run_worker(__file__, [library], setting, env={"LD_LIBRARY_PATH": str(Path(sys.prefix) / "lib")})
            results[f"{setting}/{library}"] = out
            if "missing" in out:
                print(setting, library, "not available:", out["missing"], file=sys.stderr)
                continue
            rows.append(["one core" if setting == "one" else "all cores", library] +
                        [f"{r['gflops']:.0f} ({r['cpu_per_wall']:.2f})" for r in out["rates"].values()])
            print(setting, library, json.dumps(out), file=sys.stderr, flush=True)
    text = markdown_table(["setting", "library"] + list(SHAPES), rows)
    text += ("\nGFLOP/s (CPU time / wall time in parentheses), float32, median of repeats, each library in "
             f"its own process (`python benchmarks/gemm_providers.py`); wheels: {_wheel_versions()}.\n")
    write_results("gemm_providers", results, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
