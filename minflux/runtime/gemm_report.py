"""``python -m minflux.runtime.gemm_report [--again]``: which library multiplies minflux's products on
this machine, the calibration it chose by (`minflux.runtime.gemm_choice`), and with ``--again`` a new
calibration."""
from __future__ import annotations

import sys

import numpy as np

from . import gemm_choice, gemm_provider


def main(argv: list[str] | None = None) -> int:
    """Print the machine, the calibration table and the library each calibration shape goes to."""
    if argv is None:
        argv = sys.argv[1:]
    print(f"MINFLUX_GEMM={gemm_provider.choice}; loaded: {gemm_provider.provider}")
    for key, value in gemm_choice.machine().items():
        print(f"  {key}: {value}")
    if gemm_provider.gemm is None:
        print("numpy multiplies every product (no other library is loaded)")
        return 0
    for dtype in (np.float32, np.float64):
        if "--again" in argv:
            gemm_choice._tables.pop(np.dtype(dtype).name, None)
            gemm_choice.write(gemm_choice.cache_file(dtype), gemm_choice.calibrate(dtype))
        print(f"\n{np.dtype(dtype).name}: GFLOP/s on one thread ({gemm_choice.cache_file(dtype)})")
        for row in gemm_choice.table(dtype):
            m, k, n, ta, tb = row["shape"]
            rates = ", ".join(f"{lib} {2 * m * k * n / s / 1e9:6.1f}" for lib, s in row["seconds"].items())
            chosen = (gemm_provider.provider if gemm_provider.choice != "auto"
                      else gemm_choice.nearest(dtype, m, k, n, [row], ta, tb))
            print(f"  {m:5d} x {k:5d}{'^T' if ta else '  '} @ {k:5d} x {n:5d}{'^T' if tb else '  '}: {rates}"
                  f"  -> {chosen}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
