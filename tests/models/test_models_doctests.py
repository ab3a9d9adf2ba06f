"""Run the docstring examples of every models module under its installed name, minflux_models (pytest's
doctest collection would import models/ as a second copy named models)."""
import doctest
import importlib
import pkgutil

import pytest

import minflux_models

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)

MODULES = ["minflux_models"] + sorted(m.name for m in pkgutil.walk_packages(minflux_models.__path__,
                                                                             "minflux_models."))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"
