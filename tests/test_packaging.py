"""A wheel built from the tree installs into a fresh virtual environment under names of its own
(minflux, minflux_models, minflux_train: no ``train`` or ``models`` to collide with another project's),
and its console scripts and ``python -m minflux_train`` work from an unrelated folder with the shipped
configs (no network needed)."""
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run(*args, cwd, check=True):
    done = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(cwd)})
    if check and done.returncode != 0:
        raise AssertionError(f"{args} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done


@pytest.mark.slow
def test_the_installed_wheel_runs_from_another_folder(tmp_path):
    source = tmp_path / "source"  # a copy, so building leaves nothing in the working tree
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "minflux", "models", "train", "configs"):
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy2
        copy(REPO / name, source / name, **({"symlinks": True, "ignore": shutil.ignore_patterns(
            "__pycache__")} if copy is shutil.copytree else {}))
    run(sys.executable, "-m", "pip", "wheel", source, "--no-deps", "--no-build-isolation", "-q", "-w",
        tmp_path / "wheels", cwd=tmp_path)
    (wheel,) = (tmp_path / "wheels").glob("minflux-*.whl")

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                    cwd=tmp_path).stdout.strip())
    # numpy, numba, h5py and tqdm from this interpreter's environment (a path, so its .pth files and
    # any editable install of this project are not taken along)
    (site / "outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "-q", wheel,
        cwd=tmp_path)

    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "models").mkdir(parents=True)
    (elsewhere / "train.py").write_text("raise SystemExit('the user train.py ran')\n")
    (elsewhere / "models" / "__init__.py").write_text("raise SystemExit('the user models ran')\n")
    for tool in ("train", "evaluate", "sample", "boundaries", "plot"):
        out = run(venv / "bin" / f"minflux-{tool}", "--help", cwd=elsewhere).stdout
        assert out.startswith(f"usage: minflux-{tool}"), out
    clean = tmp_path / "clean"
    clean.mkdir()
    (record,) = site.glob("minflux-*.dist-info/RECORD")
    assert {line.split("/")[0] for line in record.read_text().splitlines()
            if not line.startswith("../")} == {"minflux", "minflux_models", "minflux_train", record.parent.name}
    for name in ("train", "models"):
        assert "ModuleNotFoundError" in run(python, "-c", f"import {name}", cwd=clean, check=False).stderr
    assert "usage: python -m minflux_train" in run(python, "-m", "minflux_train", "--help", cwd=clean).stdout
    where = run(python, "-c", "import minflux_train.config as c; print(c.resolve_path('hmlstm_ptb'))",
                cwd=clean)
    assert where.stdout.strip().startswith(str(site)), where.stdout
    missing = run(venv / "bin" / "minflux-train", "--config", "nope", cwd=elsewhere, check=False)
    assert missing.returncode == 1
    assert "shipped configs: default.toml, hmlstm_enwik8.toml, hmlstm_ptb.toml" in missing.stderr

