"""Which packages the distribution holds (the rest of its configuration is in pyproject.toml).

models/ and train/ install as ``minflux_models`` and ``minflux_train``, names of our own, so that a
``pip install .`` takes no ``models`` or ``train`` from another project. setuptools finds packages by
their folder's name, which these two do not have, so they are listed from their folders here; a new
subpackage anywhere is picked up without a list to edit.
"""
from setuptools import find_packages, setup

INSTALLED_AS = {"minflux_models": "models", "minflux_train": "train"}


def packages() -> list[str]:
    """``minflux`` and its subpackages, then models/ and train/ and theirs under their installed names.

    >>> [name for name in packages() if not name.startswith("minflux.")]
    ['minflux', 'minflux_models', 'minflux_train', 'minflux_train.data']
    """
    found = find_packages(include=["minflux", "minflux.*"])
    for name, folder in INSTALLED_AS.items():
        found += [name + sub.removeprefix(folder) for sub in find_packages(include=[folder, folder + ".*"])]
    return found


if __name__ == "__main__":  # setuptools runs this file as a script; importing it builds nothing
    setup(package_dir=INSTALLED_AS, packages=packages())
