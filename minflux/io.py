"""Checkpoints in HDF5: model arrays, optimiser state and JSON-able metadata in one file.

Layout (format version 1)::

    /                     attrs: format="minflux-checkpoint", format_version, minflux_version,
                                 meta (JSON; arrays in it refer to /meta_arrays)
    /model/<name>         one dataset per distinct array of the model (attr ``name``: dotted name)
    /opt_state/<name>     one group per optimiser leaf: attrs rule (JSON), frozen, state (JSON with
                          references to the group's datasets "0", "1", ...)
    /meta_arrays/<k>      arrays found in the metadata

Every array is saved, trainable or not, under its dotted name (``layers.0.W``); a tied array once.
`save` writes a temporary file in the same directory and renames it over ``path``, so a crash never
leaves a half-written checkpoint. `load` reads and checks the whole file before it changes anything,
then copies the arrays *in place* into the given model and optimiser state (so references to them
stay valid, tied arrays stay tied and each array stays on its device); it also restores the rules'
hyperparameters (a learning rate changed by ``optim.adjust``) and frozen flags from the file.
"""
from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from typing import Any

import numpy as np

from ._version import __version__
from .backend import get_array_module, is_array, to_numpy
from ._load_report import LoadReport
from .tree import is_leaf, named_leaves

FORMAT = "minflux-checkpoint"
FORMAT_VERSION = 1

__all__ = ["Checkpoint", "CheckpointError", "CheckpointMismatch", "FORMAT_VERSION", "load", "read", "save"]


class CheckpointError(ValueError):
    """A file is not a readable minflux checkpoint (not HDF5, truncated, or an unknown format)."""


class CheckpointMismatch(CheckpointError):
    """A checkpoint does not fit the model or optimiser state it is loaded into; lists every mismatch."""


# -- encoding of metadata and optimiser states ------------------------------------------------------

def _encode(value: Any, arrays: list, where: str) -> Any:
    """A JSON-able form of ``value``; arrays are appended to ``arrays`` and referenced by index."""
    if is_leaf(value):
        arrays.append(to_numpy(value))
        return {"__array__": len(arrays) - 1}
    if isinstance(value, np.random.Generator):
        return {"__generator__": value.bit_generator.state}
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v, arrays, f"{where}[{k}]") for k, v in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(v, arrays, f"{where}[{k}]") for k, v in enumerate(value)]
    if isinstance(value, dict):
        bad = [k for k in value if not isinstance(k, str)]
        if bad:
            raise TypeError(f"mf.save: {where} has a non-string key {bad[0]!r}; checkpoint metadata "
                            f"dicts need string keys")
        return {"__dict__": {k: _encode(v, arrays, f"{where}[{k!r}]") for k, v in value.items()}}
    raise TypeError(f"mf.save: {where} is a {type(value).__name__}, which a checkpoint cannot hold; "
                    f"metadata may contain numbers, strings, None, lists, tuples, dicts with string "
                    f"keys, arrays and numpy Generators")


def _decode(value: Any, arrays: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v, arrays) for v in value]
    if isinstance(value, dict):
        if "__array__" in value:
            return arrays[value["__array__"]]
        if "__generator__" in value:
            state = value["__generator__"]
            rng = np.random.Generator(getattr(np.random, state["bit_generator"])())
            rng.bit_generator.state = state
            return rng
        if "__tuple__" in value:
            return tuple(_decode(v, arrays) for v in value["__tuple__"])
        return {k: _decode(v, arrays) for k, v in value["__dict__"].items()}
    return value


def _rule_json(rule) -> dict:
    from .optim.rule import OptimiserChain, hyperparameters

    if isinstance(rule, OptimiserChain):
        return {"type": "OptimiserChain", "rules": [_rule_json(r) for r in rule.rules]}
    return {"type": type(rule).__name__, **hyperparameters(rule)}


def _key(name: str) -> str:
    return name.replace("%", "%25").replace("/", "%2F") or "%root"


# -- save ---------------------------------------------------------------------------------------

def _write_dataset(group, key: str, array: np.ndarray, name: str | None = None):
    if array.dtype.kind not in "biufc":
        raise TypeError(f"mf.save: array {name or key} has dtype {array.dtype}, which checkpoints "
                        f"do not store; use a numeric dtype")
    dataset = group.create_dataset(key, data=array)
    if name is not None:
        dataset.attrs["name"] = name
    return dataset


def save(path: str | os.PathLike, *, model: Any = None, opt_state: Any = None, **meta) -> str:
    """Write a checkpoint atomically: ``model`` arrays, optimiser state and metadata ``**meta``.

    ``meta`` values may be numbers, strings, lists, tuples, dicts, arrays and numpy Generators (whose
    state is saved; `load` gives back an equal Generator). Returns the path.

    >>> import os, tempfile, numpy as np, minflux as mf
    >>> model = mf.nn.Dense(2, 1, rng=np.random.default_rng(0))
    >>> path = os.path.join(tempfile.mkdtemp(), "model.h5")
    >>> _ = mf.save(path, model=model, step=10, config={"hidden": 1})
    >>> fresh = mf.nn.Dense(2, 1, rng=np.random.default_rng(1))
    >>> mf.load(path, model=fresh)
    {'step': 10, 'config': {'hidden': 1}}
    >>> bool((fresh.W == model.W).all())
    True
    """
    from .optim.state import named_state_leaves

    path = os.fspath(path)
    model_arrays = [] if model is None else [
        (name, to_numpy(a)) for name, a in named_leaves(model, trainable_only=False)]
    leaves = [] if opt_state is None else [
        (name, leaf, []) for name, leaf in named_state_leaves(opt_state)]
    encoded_leaves = [(name, leaf, _encode(leaf.state, arrays, f"optimiser state of {name}"), arrays)
                      for name, leaf, arrays in leaves]
    meta_arrays: list = []
    meta_json = json.dumps(_encode(meta, meta_arrays, "metadata"))

    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp", dir=directory)
    os.close(fd)
    try:
        import h5py

        with h5py.File(tmp, "w") as f:
            f.attrs["format"] = FORMAT
            f.attrs["format_version"] = FORMAT_VERSION
            f.attrs["minflux_version"] = __version__
            f.attrs["meta"] = meta_json
            if model is not None:
                group = f.create_group("model")
                for name, array in model_arrays:
                    _write_dataset(group, _key(name), array, name)
            if opt_state is not None:
                group = f.create_group("opt_state")
                for name, leaf, state_json, arrays in encoded_leaves:
                    sub = group.create_group(_key(name))
                    sub.attrs["name"] = name
                    sub.attrs["rule"] = json.dumps(_rule_json(leaf.rule))
                    sub.attrs["frozen"] = bool(leaf.frozen)
                    sub.attrs["state"] = json.dumps(state_json)
                    for k, array in enumerate(arrays):
                        _write_dataset(sub, str(k), array, f"{name} state {k}")
            group = f.create_group("meta_arrays")
            for k, array in enumerate(meta_arrays):
                _write_dataset(group, str(k), array, f"metadata array {k}")
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path


# -- read and load ------------------------------------------------------------------------------

@dataclasses.dataclass
class Checkpoint:
    """The contents of a checkpoint file, on the host: ``model`` and ``opt_state`` map dotted names
    to arrays and to ``{"rule", "frozen", "state"}``; ``meta`` is the saved metadata."""

    model: dict | None
    opt_state: dict | None
    meta: dict
    format_version: int


def read(path: str | os.PathLike) -> Checkpoint:
    """Read a whole checkpoint into host memory, checking that it is one.

    >>> import os, tempfile, numpy as np, minflux as mf
    >>> path = mf.save(os.path.join(tempfile.mkdtemp(), "c.h5"), model={"w": np.arange(3.0)})
    >>> mf.io.read(path).model
    {'w': array([0., 1., 2.])}
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no checkpoint at {path}")
    import h5py

    try:
        with h5py.File(path, "r") as f:
            if f.attrs.get("format") != FORMAT:
                raise CheckpointError(f"{path} is an HDF5 file but not a minflux checkpoint (its "
                                      f"'format' attribute is {f.attrs.get('format')!r})")
            version = int(f.attrs["format_version"])
            if version > FORMAT_VERSION:
                raise CheckpointError(f"{path} has checkpoint format version {version}; this minflux "
                                      f"reads versions up to {FORMAT_VERSION}. Upgrade minflux.")
            model = None
            if "model" in f:
                model = {ds.attrs["name"]: ds[()] for ds in f["model"].values()}
            opt_state = None
            if "opt_state" in f:
                opt_state = {}
                for group in f["opt_state"].values():
                    arrays = {str(k): ds[()] for k, ds in group.items()}
                    state = _decode(json.loads(group.attrs["state"]), {int(k): v for k, v in arrays.items()})
                    opt_state[group.attrs["name"]] = {"rule": json.loads(group.attrs["rule"]),
                                                      "frozen": bool(group.attrs["frozen"]),
                                                      "state": state}
            meta_arrays = {int(k): ds[()] for k, ds in f["meta_arrays"].items()}
            meta = _decode(json.loads(f.attrs["meta"]), meta_arrays)
    except CheckpointError:
        raise
    except (OSError, KeyError, ValueError, TypeError) as e:
        raise CheckpointError(f"cannot read checkpoint {path}: the file is not HDF5, is truncated or is "
                              f"damaged ({type(e).__name__}: {e}). The file was left untouched.") from e
    return Checkpoint(model, opt_state, meta, version)


def _describe(a) -> str:
    return f"{np.dtype(a.dtype).name}{list(a.shape)}"


def _check_arrays(kind: str, name: str, target, loaded, problems: list) -> None:
    if tuple(target.shape) != tuple(loaded.shape) or np.dtype(target.dtype) != loaded.dtype:
        problems.append(f"{kind} {name}: the checkpoint has {_describe(loaded)}, the target "
                        f"{_describe(target)}")


def _check_state(name: str, target, loaded, problems: list) -> None:
    if is_array(target) and isinstance(loaded, np.ndarray):
        _check_arrays("optimiser state of", name, target, loaded, problems)
    elif isinstance(target, tuple) and isinstance(loaded, tuple) and len(target) == len(loaded):
        for k, (t, v) in enumerate(zip(target, loaded)):
            _check_state(f"{name}[{k}]", t, v, problems)
    elif isinstance(target, (list, tuple, dict)) or is_array(target) or \
            isinstance(loaded, (list, tuple, dict, np.ndarray)):
        problems.append(f"optimiser state of {name}: the checkpoint holds {_shape_of(loaded)}, the "
                        f"target {_shape_of(target)}")


def _shape_of(x) -> str:
    if is_array(x):
        return f"an array {_describe(x)}"
    if isinstance(x, tuple):
        return f"a tuple of {len(x)}"
    return f"a {type(x).__name__}"


def _check_rule(name: str, rule, saved: dict, problems: list) -> None:
    from .optim.rule import OptimiserChain

    if type(rule).__name__ != saved.get("type"):
        problems.append(f"optimiser rule of {name}: the checkpoint has {saved.get('type')}, the "
                        f"target {type(rule).__name__}")
    elif isinstance(rule, OptimiserChain):
        if len(rule.rules) != len(saved["rules"]):
            problems.append(f"optimiser rule of {name}: the checkpoint's chain has "
                            f"{len(saved['rules'])} rules, the target's {len(rule.rules)}")
        else:
            for r, s in zip(rule.rules, saved["rules"]):
                _check_rule(name, r, s, problems)
    else:
        fields = {f.name for f in dataclasses.fields(rule)}
        extra = sorted(set(saved) - fields - {"type"})
        if extra:
            problems.append(f"optimiser rule of {name}: the checkpoint's {saved['type']} has "
                            f"hyperparameters {extra} that this version does not know")


def _restored_rule(rule, saved: dict):
    from .optim.rule import OptimiserChain

    if isinstance(rule, OptimiserChain):
        return OptimiserChain(tuple(_restored_rule(r, s) for r, s in zip(rule.rules, saved["rules"])))
    return dataclasses.replace(rule, **{k: v for k, v in saved.items() if k != "type"})


def _copy_into(target, loaded):
    if is_array(target):
        xp = get_array_module(target)
        target[...] = xp.asarray(loaded)
        return target
    if isinstance(target, tuple):
        return tuple(_copy_into(t, v) for t, v in zip(target, loaded))
    return loaded


def _sorted_out(name: str, found: list, problems: list, skipped: dict, strict: bool) -> bool:
    """File ``found`` mismatches of one entry as problems (strict) or as one skip; True if it fits."""
    if not found:
        return True
    if strict:
        problems.extend(found)
    else:
        label = f"{name or '<root>'}: "
        skipped[name] = "; ".join(text.split(label, 1)[-1] for text in found)
    return False


def load(path: str | os.PathLike, *, model: Any = None, opt_state: Any = None, strict: bool = True):
    """Load a checkpoint into ``model`` and ``opt_state`` in place; returns the saved metadata.

    Names, shapes, dtypes and optimiser rules are all checked first; any mismatch raises
    `CheckpointMismatch` listing every one of them, and nothing is changed. With ``strict=False``
    what matches is loaded and the rest is left as it is (fine-tuning from a checkpoint with another
    head); the returned `LoadReport` (the metadata dict, with ``loaded`` and ``skipped``) says what
    was skipped and why, and logged at INFO. A file that is not HDF5, is truncated or is not a
    minflux checkpoint raises `CheckpointError` either way. Arrays keep their device (CuPy arrays
    are filled from the host copy).

    >>> import os, tempfile, numpy as np, minflux as mf
    >>> path = mf.save(os.path.join(tempfile.mkdtemp(), "c.h5"), model={"w": np.ones(2)}, step=3)
    >>> target = {"w": np.zeros(2)}
    >>> mf.load(path, model=target)["step"], target["w"]
    (3, array([1., 1.]))
    >>> other = {"w": np.zeros(2), "head": np.zeros(5)}
    >>> mf.load(path, model=other, strict=False).skipped["model"]
    {'head': 'missing from the checkpoint'}
    """
    from .optim.state import named_state_leaves

    checkpoint = read(path)
    problems: list[str] = []
    skipped: dict = {"model": {}, "opt_state": {}}
    model_targets = []
    if model is not None:
        targets = list(named_leaves(model, trainable_only=False))
        if checkpoint.model is None:
            problems.append("model: the checkpoint holds no model arrays")
            skipped["model"] = {n: "the checkpoint holds no model arrays" for n, _ in targets}
        else:
            for name, target in targets:
                found: list[str] = []
                if name not in checkpoint.model:
                    found.append(f"model array {name or '<root>'}: missing from the checkpoint")
                else:
                    _check_arrays("model array", name or "<root>", target, checkpoint.model[name], found)
                if _sorted_out(name, found, problems, skipped["model"], strict):
                    model_targets.append((name, target))
            for name in sorted(set(checkpoint.model) - {n for n, _ in targets}):
                _sorted_out(name, [f"model array {name or '<root>'}: in the checkpoint but not in the "
                                   f"target"], problems, skipped["model"], strict)
    state_targets = []
    if opt_state is not None:
        leaves = list(named_state_leaves(opt_state))
        if checkpoint.opt_state is None:
            problems.append("opt_state: the checkpoint holds no optimiser state")
            skipped["opt_state"] = {n: "the checkpoint holds no optimiser state" for n, _ in leaves}
        else:
            for name, leaf in leaves:
                found = []
                saved = checkpoint.opt_state.get(name)
                if saved is None:
                    found.append(f"optimiser state of {name or '<root>'}: missing from the checkpoint")
                else:
                    _check_rule(name, leaf.rule, saved["rule"], found)
                    _check_state(name, leaf.state, saved["state"], found)
                if _sorted_out(name, found, problems, skipped["opt_state"], strict):
                    state_targets.append((name, leaf))
            for name in sorted(set(checkpoint.opt_state) - {n for n, _ in leaves}):
                _sorted_out(name, [f"optimiser state of {name or '<root>'}: in the checkpoint but not "
                                   f"in the target"], problems, skipped["opt_state"], strict)
    if problems and strict:
        raise CheckpointMismatch(f"checkpoint {os.fspath(path)} does not match the target "
                                 f"({len(problems)} problem{'s' if len(problems) > 1 else ''}); nothing "
                                 f"was loaded:\n  - " + "\n  - ".join(problems))
    for name, target in model_targets:
        _copy_into(target, checkpoint.model[name])
    for name, leaf in state_targets:
        saved = checkpoint.opt_state[name]
        leaf.state = _copy_into(leaf.state, saved["state"])
        leaf.rule = _restored_rule(leaf.rule, saved["rule"])
        leaf.frozen = saved["frozen"]
    report = LoadReport(checkpoint.meta, {"model": [n for n, _ in model_targets],
                                          "opt_state": [n for n, _ in state_targets]}, skipped)
    report.log_skips(os.fspath(path))
    return report
