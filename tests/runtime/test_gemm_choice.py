"""The product library chosen by measurement: calibrated once per machine, cached with integrity
rules, read alike by every process, and pinned by MINFLUX_GEMM."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from minflux.runtime import gemm_choice, gemm_provider

INSTALLED = gemm_provider._library_path() is not None


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty cache and no decisions yet, as in a new process on a new machine."""
    monkeypatch.setenv("MINFLUX_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(gemm_choice, "_decisions", {})
    monkeypatch.setattr(gemm_choice, "_tables", {})
    return tmp_path


def fake_rows(winner: str) -> list:
    return [{"shape": list(shape), "seconds": {"numpy": 1.0 if winner == "numpy" else 2.0,
                                                "mkl": 1.0 if winner == "mkl" else 2.0}}
            for shape in gemm_choice.CALIBRATION_SHAPES]


def test_the_faster_library_at_the_nearest_shape_of_the_same_layout_is_chosen():
    rows = fake_rows("numpy")
    rows[3]["seconds"] = {"numpy": 2.0, "mkl": 1.0}          # 32 x 512 @ (384 x 512).T: MKL
    assert gemm_choice.nearest(np.float32, 32, 512, 384, rows, False, True) == "mkl"
    assert gemm_choice.nearest(np.float32, 32, 512, 384, rows) == "numpy"   # same size, other layout
    rows[3]["seconds"] = {"numpy": 1.0, "mkl": 0.98}          # within 3%: numpy's bits stay
    assert gemm_choice.nearest(np.float32, 32, 512, 384, rows, False, True) == "numpy"


def test_a_calibration_is_measured_once_then_read_from_the_cache(fresh, monkeypatch):
    measured = []
    monkeypatch.setattr(gemm_choice, "calibrate", lambda dtype: measured.append(dtype) or fake_rows("mkl"))
    assert gemm_choice.table(np.float32) == fake_rows("mkl") and len(measured) == 1
    (path,) = (fresh / "gemm").iterdir()
    assert oct(os.stat(fresh / "gemm").st_mode & 0o777) == "0o700"
    assert json.loads(path.read_text())["machine"] == gemm_choice.machine()
    monkeypatch.setattr(gemm_choice, "_tables", {})
    assert gemm_choice.table(np.float32) == fake_rows("mkl") and len(measured) == 1   # read, not measured


def test_processes_that_calibrate_at_once_multiply_with_the_first_table_written(fresh, monkeypatch):
    """Another process writes its table while this one measures: this one takes that table, and
    leaves it, rather than choose by its own measurements (on a CPU where the libraries nearly tie,
    the two could choose differently and give other last bits)."""
    def measured_while_another_wrote(dtype):
        gemm_choice.write(gemm_choice.cache_file(dtype), fake_rows("mkl"))   # the other process
        return fake_rows("numpy")

    monkeypatch.setattr(gemm_choice, "calibrate", measured_while_another_wrote)
    assert gemm_choice.table(np.float32) == fake_rows("mkl")
    (path,) = (fresh / "gemm").iterdir()
    assert json.loads(path.read_text())["rows"] == fake_rows("mkl")


@pytest.mark.parametrize("damage", ["truncated", "another machine", "writable by others"])
def test_a_damaged_foreign_or_untrusted_table_is_measured_again(fresh, monkeypatch, damage):
    monkeypatch.setattr(gemm_choice, "calibrate", lambda dtype: fake_rows("numpy"))
    gemm_choice.table(np.float32)
    (path,) = (fresh / "gemm").iterdir()
    record = json.loads(path.read_text())
    record["rows"] = fake_rows("mkl")       # what a reader must not take
    if damage == "another machine":
        record["machine"]["cpu"] = "another CPU"
    path.write_text(json.dumps(record)[: 40 if damage == "truncated" else None])
    if damage == "writable by others":
        os.chmod(path, 0o666)
    warnings = []
    monkeypatch.setattr(gemm_choice, "warn_once", warnings.append)
    monkeypatch.setattr(gemm_choice, "_tables", {})
    assert gemm_choice.table(np.float32) == fake_rows("numpy")
    assert len(warnings) == 1 and "measuring again" in warnings[0]


def test_a_table_measured_with_other_blas_kernels_is_measured_again(fresh, monkeypatch):
    """OPENBLAS_CORETYPE can make the same library on the same CPU run half as fast: a table timed
    with one set of kernels decides nothing for another."""
    monkeypatch.setattr(gemm_choice, "blas_kernels", lambda: "libscipy_openblas Haswell, OPENBLAS_CORETYPE=Haswell")
    monkeypatch.setattr(gemm_choice, "calibrate", lambda dtype: fake_rows("mkl"))
    haswell = gemm_choice.cache_file(np.float32)
    assert gemm_choice.table(np.float32) == fake_rows("mkl")
    monkeypatch.setattr(gemm_choice, "blas_kernels", lambda: "libscipy_openblas SkylakeX")
    monkeypatch.setattr(gemm_choice, "calibrate", lambda dtype: fake_rows("numpy"))
    monkeypatch.setattr(gemm_choice, "_tables", {})
    assert gemm_choice.cache_file(np.float32) != haswell
    assert gemm_choice.table(np.float32) == fake_rows("numpy")
    assert sorted(path.name for path in (fresh / "gemm").iterdir()) == sorted(
        [haswell.name, gemm_choice.cache_file(np.float32).name])


def test_the_kernels_named_are_the_ones_openblas_runs_and_the_settings_that_chose_them():
    script = "from minflux.runtime.gemm_choice import blas_kernels; print(blas_kernels())"
    environment = {k: v for k, v in os.environ.items() if k not in gemm_choice.KERNEL_SETTINGS}
    forced = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                            env={**environment, "OPENBLAS_CORETYPE": "Sandybridge"}).stdout
    if "openblas" not in forced:
        pytest.skip("numpy here is not built on OpenBLAS")
    assert forced.split(",")[0].endswith("Sandybridge") and "OPENBLAS_CORETYPE=Sandybridge" in forced
    chosen = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                            env=environment).stdout
    assert "=" not in chosen and "openblas" in chosen


def test_the_calibration_times_blas_on_one_thread_whoever_asks_first(monkeypatch):
    """A report or a probe may ask before minflux has limited BLAS: what it times and caches is still
    one thread, as minflux's products run, and the caller's BLAS threads are left as they were."""
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads():
        return {info["filepath"]: info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"}

    seen = []
    monkeypatch.setattr(gemm_choice, "_best", lambda call: seen.append(blas_threads()) or 1.0)
    with threadpool_limits(limits=2, user_api="blas"):
        before = blas_threads()
        gemm_choice.calibrate(np.float32)
        after = blas_threads()
        assert 2 in before.values() and {path: after[path] for path in before} == before
    assert seen and all(set(threads.values()) == {1} for threads in seen)


def test_minflux_gemm_pins_the_library(monkeypatch):
    monkeypatch.setattr(gemm_choice, "_decisions", {})
    monkeypatch.setattr(gemm_provider, "gemm", lambda a, b, out: False)
    monkeypatch.setattr(gemm_provider, "choice", "mkl")
    assert gemm_choice.prefers_gemm(16, 16, 16, np.dtype(np.float32))
    monkeypatch.setattr(gemm_choice, "_decisions", {})
    monkeypatch.setattr(gemm_provider, "gemm", None)
    assert not gemm_choice.prefers_gemm(64, 1536, 2048, np.dtype(np.float32))


@pytest.mark.skipif(not INSTALLED, reason="the mkl wheel is not installed")
def test_processes_on_one_machine_share_one_calibration_and_the_report_shows_it(tmp_path):
    env = dict(os.environ, MINFLUX_CACHE_DIR=str(tmp_path), MINFLUX_GEMM="auto")
    probe = ("import numpy as np; from minflux.runtime import gemm_choice as g; "
             "print([g.prefers_gemm(m, k, n, np.dtype(np.float32), ta, tb) "
             "for m, k, n, ta, tb in g.CALIBRATION_SHAPES])")
    first, second = (subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                                    check=True).stdout for _ in range(2))
    assert first == second and first.startswith("[")
    report = subprocess.run([sys.executable, "-m", "minflux.runtime.gemm_report"], env=env, capture_output=True,
                            text=True, check=True).stdout
    assert "loaded: mkl" in report and "float32: GFLOP/s on one thread" in report and "-> " in report
