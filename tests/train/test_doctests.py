"""Run the docstring examples of every train module under its installed name, minflux_train (pytest's
doctest collection covers minflux/, and would import train/ as a second copy named train)."""
import doctest
import importlib
import pkgutil

import pytest

import minflux_train

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)

MODULES = sorted(m.name for m in pkgutil.walk_packages(minflux_train.__path__, "minflux_train.")
                 if not m.name.endswith("__main__"))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"
