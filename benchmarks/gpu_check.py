"""The prepared GPU check: gpu-marked tests, the cell-update benchmark and an HM-LSTM training step.

Run on a machine with one NVIDIA GPU and CuPy (PyTorch and JAX optional); it stays under about eight
minutes (each part has its own time limit) and writes every result into ONE JSON file
(``benchmarks/results/gpu_check.json`` by default) plus a Markdown summary next to it:

    python benchmarks/gpu_check.py [--out DIR] [--quick]        (or: sh benchmarks/gpu_check.sh)

``--quick`` runs the benchmarks at fewer sizes and repeats (a smoke test of the check itself).
Each part runs in its own process, so one that fails or times out leaves the others' results.
"""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from minflux.files import write_atomically

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"

# Time limits in seconds (150 + 170 + 130 = 7.5 minutes, plus start-up, under 8 minutes); the tests get
# the most because a fresh machine compiles every CuPy and minflux kernel once (NVRTC).
LIMITS = {"tests": 150, "cell_update": 170, "hmlstm_step": 130}


def device_info() -> dict:
    info = {"python": platform.python_version(), "host": platform.node()}
    try:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(0)
        info.update(gpu=props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"]),
                    memory_gib=round(props["totalGlobalMem"] / 2**30, 1),
                    cupy=cupy.__version__, cuda_runtime=cupy.cuda.runtime.runtimeGetVersion(),
                    driver=cupy.cuda.runtime.driverGetVersion())
    except Exception as exc:
        info["gpu"] = f"unavailable: {type(exc).__name__}: {exc}"
    for name in ("numpy", "torch", "jax"):
        try:
            info[name] = __import__(name).__version__
        except Exception:
            info[name] = None
    return info


def run_part(name: str, cmd: list, json_file: Path | None) -> dict:
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=LIMITS[name])
        status = "ok" if done.returncode == 0 else f"exit code {done.returncode}"
        output = done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        status = f"timed out after {LIMITS[name]} s"
        output = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
    part = {"status": status, "seconds": round(time.perf_counter() - start, 1),
            "output_tail": output[-4000:]}
    if json_file is not None and json_file.is_file():
        part["results"] = json.loads(json_file.read_text())
    print(f"[{name}] {status} in {part['seconds']} s", flush=True)
    return part


def summary(report: dict) -> str:
    lines = [f"# GPU check ({report['device'].get('gpu')})", ""]
    for name, part in report["parts"].items():
        lines.append(f"- {name}: {part['status']} ({part['seconds']} s)")
    cell = report["parts"].get("cell_update", {}).get("results", {})
    if "table" in cell:
        lines += ["", "## Cell update: forward + gradient, float32, medians", "", cell["table"]]
    step = report["parts"].get("hmlstm_step", {}).get("results", {})
    if step:
        lines += ["", "## HM-LSTM training step, PTB size (3 x 512, batch 64, segment 100)", ""]
        for impl in ("mixed", "reverse", "torch_eager"):
            r = step.get(impl)
            if isinstance(r, dict):
                lines.append(f"- {impl}: {r['seconds'] * 1e3:.0f} ms / step, {r['tokens_per_s']:.0f} tokens/s"
                             + ("" if "host_transfer_free" not in r else
                                f", host-transfer free: {r['host_transfer_free']}"))
            else:
                lines.append(f"- {impl}: {r}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(BENCH / "results"), help="folder for gpu_check.json and .md")
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    args = parser.parse_args(argv)
    out = Path(args.out)
    scratch = Path(tempfile.mkdtemp(prefix="minflux-gpu-check-"))
    py = sys.executable
    report = {"device": device_info(), "parts": {}}
    print(f"device: {report['device']}", flush=True)
    report["parts"]["tests"] = run_part(
        "tests", [py, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "tests",
                  f"--junitxml={scratch / 'tests.xml'}"], None)
    dims = "512,2048,4096" if args.quick else "512,1024,2048,4096,8192"
    repeats = "3" if args.quick else "10"
    report["parts"]["cell_update"] = run_part(
        "cell_update", [py, str(BENCH / "gpu_cell_update.py"), "--dims", dims, "--repeats", repeats,
                        "--json", str(scratch / "cell_update.json")], scratch / "cell_update.json")
    report["parts"]["hmlstm_step"] = run_part(
        "hmlstm_step", [py, str(BENCH / "gpu_hmlstm_step.py"), "--repeats", "2" if args.quick else "3",
                        "--json", str(scratch / "hmlstm_step.json")], scratch / "hmlstm_step.json")
    write_atomically(out / "gpu_check.json", json.dumps(report, indent=2) + "\n")
    write_atomically(out / "gpu_check.md", summary(report))
    print(summary(report))
    print(f"wrote {out / 'gpu_check.json'}")
    return 0 if all(p["status"] == "ok" for p in report["parts"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
