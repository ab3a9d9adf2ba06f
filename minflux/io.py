"""Checkpoints in HDF5: model arrays, optimiser state and JSON-able metadata in one file.

Layout (format version 2)::

    /                     attrs: format="minflux-checkpoint", format_version, minflux_version,
                                 meta (JSON; arrays in it refer to /meta_arrays), checksum
    /model/<name>         one dataset per distinct array of the model (attr ``name``: dotted name)
    /opt_state/<name>     one group per optimiser leaf: attrs rule (JSON), frozen, state (JSON with
                          references to the group's datasets "0", "1", ...)
    /meta_arrays/<k>      arrays found in the metadata

Every array is saved, trainable or not, under its dotted name (``layers.0.W``); a tied array once.
``checksum`` is a SHA-256 digest of every dataset (name, dtype, shape, bytes) and every attribute, so a
damaged file is refused instead of loading changed numbers (version 1 files, written before it, load
unchecked). `save` builds the file in memory and writes it through `minflux.files.write_atomically`
so a crash or a full disk never leaves a half-written checkpoint. `read` takes the file's bytes into
memory before HDF5 parses them (another process holding the file open does not matter). `load`
reads and checks the whole file before it changes anything, then copies the arrays *in place* into
the given model and optimiser state (so references to them stay valid, tied arrays stay tied and each
array stays on its device); it also restores the rules' hyperparameters (a learning rate changed by
``optim.adjust``) and frozen flags from the file.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
from typing import Any

import numpy as np

from ._version import __version__
from .backend import get_array_module, is_array, to_numpy
from ._load_report import LoadReport, mixed_rules
from .files import FileWriteError, write_atomically
from .optim.serialise import restored_rule, rule_mismatches, rule_to_json
from .optim.state import named_state_leaves
from .tree import is_leaf, named_leaves

FORMAT = "minflux-checkpoint"
FORMAT_VERSION = 2

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


def _key(name: str) -> str:
    return name.replace("%", "%25").replace("/", "%2F") or "%root"


# -- the file's contents as datasets and attributes, and their digest --------------------------------

@dataclasses.dataclass
class _Contents:
    """Everything a checkpoint file holds: ``datasets[path]`` arrays and ``attrs[path][name]`` values
    (path ``""`` is the root), which the checksum covers."""

    datasets: dict = dataclasses.field(default_factory=dict)
    attrs: dict = dataclasses.field(default_factory=dict)

    def add(self, path: str, array, **attrs) -> None:
        array = np.asarray(array)
        if array.dtype.kind not in "biufc":
            raise TypeError(f"mf.save: {attrs.get('name', path)} has dtype {array.dtype}, which checkpoints "
                            f"do not store; use a numeric dtype")
        self.datasets[path] = array
        if attrs:
            self.attrs[path] = attrs

    def digest(self) -> str:
        h = hashlib.sha256()
        for path in sorted(self.datasets):
            a = np.ascontiguousarray(self.datasets[path])
            h.update(json.dumps([path, a.dtype.str, list(a.shape)]).encode())
            h.update(a.tobytes())
        for path in sorted(self.attrs):
            for name in sorted(self.attrs[path]):
                if (path, name) != ("", "checksum"):
                    h.update(json.dumps([path, name, _plain(self.attrs[path][name])]).encode())
        return h.hexdigest()


def _plain(value):
    return value.item() if isinstance(value, np.generic) else value


def _contents(model, opt_state, meta: dict) -> _Contents:

    out = _Contents()
    meta_arrays: list = []
    out.attrs[""] = dict(format=FORMAT, format_version=FORMAT_VERSION, minflux_version=__version__,
                         meta=json.dumps(_encode(meta, meta_arrays, "metadata")))
    if model is not None:
        out.attrs["model"] = {}
        for name, array in named_leaves(model, trainable_only=False):
            out.add(f"model/{_key(name)}", to_numpy(array), name=name)
    if opt_state is not None:
        out.attrs["opt_state"] = {}
        for name, leaf in named_state_leaves(opt_state):
            arrays: list = []
            state = json.dumps(_encode(leaf.state, arrays, f"optimiser state of {name}"))
            group = f"opt_state/{_key(name)}"
            out.attrs[group] = dict(name=name, rule=json.dumps(rule_to_json(leaf.rule)),
                                    frozen=bool(leaf.frozen), state=state)
            for k, array in enumerate(arrays):
                out.add(f"{group}/{k}", array, name=f"{name} state {k}")
    out.attrs["meta_arrays"] = {}
    for k, array in enumerate(meta_arrays):
        out.add(f"meta_arrays/{k}", array, name=f"metadata array {k}")
    out.attrs[""]["checksum"] = out.digest()
    return out


def _image(contents: _Contents) -> bytes:
    """The HDF5 file holding ``contents``, built in memory."""
    import h5py

    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as f:
        for path in sorted(contents.attrs, key=lambda p: p.count("/")):
            if path and path not in contents.datasets:
                f.require_group(path)
        for path, array in contents.datasets.items():
            f.create_dataset(path, data=array)
        for path, attrs in contents.attrs.items():
            f[path or "/"].attrs.update(attrs)
    return buffer.getvalue()


# -- save ---------------------------------------------------------------------------------------

def save(path: str | os.PathLike, *, model: Any = None, opt_state: Any = None, **meta) -> str:
    """Write a checkpoint atomically: ``model`` arrays, optimiser state and metadata ``**meta``.

    ``meta`` values may be numbers, strings, lists, tuples, dicts, arrays and numpy Generators (whose
    state is saved; `load` gives back an equal Generator). The file is built in memory, then written
    through a temporary file and a rename with permissions 0600; a full disk raises
    `minflux.files.FileWriteError` and leaves the previous file as it was. The folder must exist (a
    missing one is a `FileWriteError` naming it, not created). Returns the path.

    >>> import os, tempfile, numpy as np, minflux as mf
    >>> model = mf.nn.Dense(2, 1, rng=np.random.default_rng(0))
    >>> path = os.path.join(tempfile.mkdtemp(), "model.h5")
    >>> _ = mf.save(path, model=model, step=10, config={"hidden": 1})
    >>> fresh = mf.nn.Dense(2, 1, rng=np.random.default_rng(1))
    >>> mf.load(path, model=fresh)
    {'step': 10, 'config': {'hidden': 1}}
    >>> bool((fresh.W == model.W).all()), oct(os.stat(path).st_mode & 0o777)
    (True, '0o600')
    """
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise FileWriteError(f"mf.save: cannot write {os.fspath(path)}: the folder {folder} {what}; "
                             f"nothing was written (create it first, e.g. os.makedirs({folder!r}))")
    write_atomically(path, _image(_contents(model, opt_state, meta)), mode=0o600)
    return os.fspath(path)


# -- read and load ------------------------------------------------------------------------------

@dataclasses.dataclass
class Checkpoint:
    """The contents of a checkpoint file, on the host: ``model`` and ``opt_state`` map dotted names
    to arrays and to ``{"rule", "frozen", "state"}``; ``meta`` is the saved metadata."""

    model: dict | None
    opt_state: dict | None
    meta: dict
    format_version: int


def _parse(path: str) -> tuple[_Contents, int]:
    """The datasets and attributes of checkpoint ``path``, checked against its checksum."""
    import h5py

    contents = _Contents()

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            contents.datasets[name] = obj[()]
        contents.attrs[name] = dict(obj.attrs)

    with open(path, "rb") as handle:
        image = handle.read()
    with h5py.File(io.BytesIO(image), "r") as f:
        contents.attrs[""] = dict(f.attrs)
        if contents.attrs[""].get("format") != FORMAT:
            raise CheckpointError(f"{path} is an HDF5 file but not a minflux checkpoint (its 'format' "
                                  f"attribute is {contents.attrs[''].get('format')!r})")
        version = int(contents.attrs[""]["format_version"])
        if version > FORMAT_VERSION:
            raise CheckpointError(f"{path} has checkpoint format version {version}; this minflux reads "
                                  f"versions up to {FORMAT_VERSION}. Upgrade minflux.")
        f.visititems(visit)
    if version >= 2 and contents.digest() != contents.attrs[""].get("checksum"):
        raise CheckpointError(f"checkpoint {path} is damaged: its contents do not match the checksum "
                              f"stored in it (a changed bit, a partial copy?); it was not loaded. Use "
                              f"another checkpoint (e.g. best.h5) or a backup.")
    return contents, version


def _unpack(contents: _Contents) -> tuple[dict | None, dict | None, dict]:
    """``(model, opt_state, meta)`` from a parsed file."""
    def arrays_under(prefix):
        return {p[len(prefix):]: a for p, a in contents.datasets.items()
                if p.startswith(prefix) and "/" not in p[len(prefix):]}

    attrs, model, opt_state = contents.attrs, None, None
    if "model" in attrs:
        model = {attrs[f"model/{key}"]["name"]: a for key, a in arrays_under("model/").items()}
    if "opt_state" in attrs:
        opt_state = {}
        for group in [p for p in attrs if p.startswith("opt_state/") and p not in contents.datasets]:
            own = {int(k): a for k, a in arrays_under(group + "/").items()}
            opt_state[attrs[group]["name"]] = {"rule": json.loads(attrs[group]["rule"]),
                                               "frozen": bool(attrs[group]["frozen"]),
                                               "state": _decode(json.loads(attrs[group]["state"]), own)}
    meta_arrays = {int(k): a for k, a in arrays_under("meta_arrays/").items()}
    return model, opt_state, _decode(json.loads(attrs[""]["meta"]), meta_arrays)


def read(path: str | os.PathLike) -> Checkpoint:
    """Read a whole checkpoint into host memory, checking that it is one and that it is undamaged.

    >>> import os, tempfile, numpy as np, minflux as mf
    >>> path = mf.save(os.path.join(tempfile.mkdtemp(), "c.h5"), model={"w": np.arange(3.0)})
    >>> mf.io.read(path).model
    {'w': array([0., 1., 2.])}
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        contents, version = _parse(path)
        model, opt_state, meta = _unpack(contents)
    except CheckpointError:
        raise
    except (OSError, KeyError, ValueError, TypeError, AttributeError, RuntimeError) as e:
        raise CheckpointError(f"cannot read checkpoint {path}: the file is not HDF5, is truncated or is "
                              f"damaged ({type(e).__name__}: {e}); the file was left untouched") from e
    if not isinstance(meta, dict):
        raise CheckpointError(f"cannot read checkpoint {path}: its metadata is not a table")
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
    elif is_array(target) and target.ndim == 0 and isinstance(loaded, (int, np.integer)) and \
            np.dtype(target.dtype).kind in "iu":
        return  # a step count saved as a number, before counts were arrays
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
    head); the returned `LoadReport` (the metadata dict, with ``loaded``, ``skipped`` and ``notes``)
    says what was skipped and why, logged at INFO. Loaded optimiser leaves take the file's
    hyperparameters (its learning rate) while skipped ones keep the target's; when the two differ,
    ``notes`` says so (logged as a warning) and `minflux.optim.adjust` gives them one value again.
    A file that is not HDF5, is truncated or is not a minflux checkpoint raises `CheckpointError`
    either way. Arrays keep their device (CuPy arrays are filled from the host copy).

    >>> import os, tempfile, numpy as np, minflux as mf
    >>> path = mf.save(os.path.join(tempfile.mkdtemp(), "c.h5"), model={"w": np.ones(2)}, step=3)
    >>> target = {"w": np.zeros(2)}
    >>> mf.load(path, model=target)["step"], target["w"]
    (3, array([1., 1.]))
    >>> other = {"w": np.zeros(2), "head": np.zeros(5)}
    >>> mf.load(path, model=other, strict=False).skipped["model"]
    {'head': 'missing from the checkpoint'}
    """

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
                    found += rule_mismatches(name, leaf.rule, saved["rule"])
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
        leaf.rule = restored_rule(leaf.rule, saved["rule"])
        leaf.frozen = saved["frozen"]
    notes = []
    if opt_state is not None:  # the loaded leaves now have the file's hyperparameters, the rest their own
        loaded_names = {n for n, _ in state_targets}
        notes = mixed_rules([leaf.rule for _, leaf in state_targets],
                            [leaf.rule for n, leaf in leaves if n not in loaded_names])
    report = LoadReport(checkpoint.meta, {"model": [n for n, _ in model_targets],
                                          "opt_state": [n for n, _ in state_targets]}, skipped, notes)
    report.log_skips(os.fspath(path))
    return report
