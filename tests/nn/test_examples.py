"""The README's custom-layer and training-loop examples do what the README says they do."""
import re
import runpy
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)
PRELUDE = "import numpy as np\nimport minflux as mf\n"


def block_with(text: str) -> str:
    (block,) = [b for b in BLOCKS if text in b]
    return block


def run(source: str, tmp_path) -> dict:
    """Run an example as a script file (scalar functions are compiled from their source file)."""
    script = tmp_path / "example.py"
    script.write_text(PRELUDE + source)
    return runpy.run_path(str(script), run_name="example")


def test_custom_layer_example_is_short_and_computes_the_highway_mix(tmp_path):
    source = block_with("class Highway")
    class_lines = source.split("class Highway")[1].split("\nlayer = ")[0].strip().splitlines()
    assert len(class_lines) < 15
    layer = run(source, tmp_path)["layer"]
    x = np.linspace(-1, 1, 12).reshape(3, 4).astype(np.float32)
    h, t = np.split(x @ layer.W + layer.b, 2, axis=-1)
    gate = 1 / (1 + np.exp(-t))
    np.testing.assert_allclose(layer(x), gate * np.tanh(h) + (1 - gate) * x, rtol=1e-5)


def test_training_loop_example_learns_and_resumes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = run(block_with("mf.save(\"checkpoint.h5\""), tmp_path)
    y = namespace["y"]
    assert float(namespace["loss"]) < 0.1 * float(np.mean(y ** 2))   # 0.1 x the loss of predicting 0
    assert namespace["restored_state"].layers[0].W.state[1][2] == 400
    np.testing.assert_array_equal(namespace["restored"](namespace["x"]), namespace["model"](namespace["x"]))
