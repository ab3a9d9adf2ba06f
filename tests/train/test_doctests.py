"""Run the docstring examples of every train module (pytest's doctest collection covers minflux/)."""
import doctest
import importlib
import pkgutil

import pytest

import train

MODULES = sorted(m.name for m in pkgutil.walk_packages(train.__path__, "train.") if not m.name.endswith("__main__"))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"
