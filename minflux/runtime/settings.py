"""Every minflux setting in one table: its name, environment variable, parser, default, and whether a
recorded schedule (`mf.compile`) depends on it.

`get` is the value now: what `set` (or the module function that wraps it, such as
`mf.set_num_threads`) gave, else the environment variable as it was at the setting's first use (a
process that sets it before then is followed; `unset` reads it again; the cache directory is read
at every use). A value the parser refuses is one `SettingError`
naming the variable and what it accepts, raised where the setting is first used (never at import).
`snapshot` is the recorded settings' values: the guard key of a compiled function holds it, so a
setting added to the table can never make a replay stale. ``python -m minflux.runtime.settings_report``
prints the table.

>>> get("max_loop_iterations") >= 1
True
>>> dict(snapshot())["gemm"] in ("auto", "mkl", "numpy")
True
>>> Setting.parse_text(SETTINGS_BY_NAME["num_threads"], "0")
Traceback (most recent call last):
...
minflux.runtime.settings.SettingError: MINFLUX_NUM_THREADS='0' is not valid: it accepts a whole number of at least 1 (unset it for the default: the cores this process may use)
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["SETTINGS", "SETTINGS_BY_NAME", "Setting", "SettingError", "chosen", "get", "set", "snapshot",
           "table", "unset"]


class SettingError(ValueError):
    """A setting's value is not one it accepts; the message names the variable and the values."""


def _boolean(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError
    return value


def _seconds(text: str) -> float | None:
    value = float(text)
    if value != value:
        raise ValueError
    return None if value <= 0 else value


def _choice(*options: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text.lower() not in options:
            raise ValueError
        return text.lower()
    return parse


def _usable_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


_BOOLEAN = "1, true, yes or on; 0, false, no or off"


@dataclass(frozen=True)
class Setting:
    """One row of the table: ``default`` is a value, or a function giving it (``default_text`` says
    it in words); ``recorded`` marks what a recorded schedule depends on."""

    name: str
    variable: str
    parse: Callable[[str], Any]
    default: Any
    accepts: str
    recorded: bool
    meaning: str
    default_text: str = ""
    live: bool = False      # read from the environment at every use, not once

    def default_value(self):
        return self.default() if callable(self.default) else self.default

    def default_description(self) -> str:
        return self.default_text or repr(self.default_value())

    def parse_text(self, text: str):
        """The value ``text`` (the environment variable's) stands for, or a `SettingError`."""
        try:
            return self.parse(text)
        except (ValueError, TypeError):
            default = self.default_description()
            raise SettingError(f"{self.variable}={text!r} is not valid: it accepts {self.accepts} (unset it "
                               f"for the default: {default})") from None


SETTINGS = (
    Setting("fusion", "MINFLUX_FUSION", _boolean, True, _BOOLEAN, True,
            "defer elementwise work under a gradient and fuse it into one kernel (`mf.set_fusion`)"),
    Setting("elementwise_backend", "MINFLUX_ELEMENTWISE", _choice("numba", "numpy"), "numba", "numba or numpy",
            True, "the CPU backend of elementwise kernels (`mf.set_elementwise_backend`)"),
    Setting("num_threads", "MINFLUX_NUM_THREADS", _positive_int, _usable_cores, "a whole number of at least 1",
            True, "threads a large kernel or product may split over (`mf.set_num_threads`)",
            "the cores this process may use"),
    Setting("max_loop_iterations", "MINFLUX_MAX_LOOP_ITERATIONS", _positive_int, 100_000,
            "a whole number of at least 1", True,
            "iterations a scalar function's while loop may run (`mf.set_max_loop_iterations`)"),
    Setting("gemm", "MINFLUX_GEMM", _choice("auto", "mkl", "numpy"), "auto", "auto, mkl or numpy", True,
            "the library of matrix products: by measurement, or pinned (`minflux.runtime.gemm_choice`)"),
    Setting("numba_branches", "MINFLUX_NUMBA_BRANCHES", _choice("auto", "select", "real"), "auto",
            "auto, select or real", True, "how numba kernels compile branches (selects, or real jumps)"),
    Setting("kernel_compiler", "MINFLUX_KERNEL_COMPILER", _choice("llvm", "numba"), "llvm", "llvm or numba",
            True, "who compiles CPU elementwise kernels: LLVM from minflux's IR, or numba from generated Python"),
    Setting("cuda_fast_math", "MINFLUX_CUDA_FAST_MATH", _boolean, False, _BOOLEAN, True,
            "float32 hardware intrinsics in CUDA kernels"),
    Setting("native_replay", "MINFLUX_NATIVE_REPLAY", _boolean, True, _BOOLEAN, False,
            "replay a compiled step's kernels, products and arithmetic as native commands, from the next "
            "call on (`minflux.schedule.native`)"),
    Setting("compile_check", "MINFLUX_COMPILE_CHECK", _boolean, False, _BOOLEAN, False,
            "check every replay of `mf.compile` against the eager function"),
    Setting("keep_freed_memory", "MINFLUX_KEEP_FREED_MEMORY", _boolean, True, _BOOLEAN, False,
            "ask glibc to keep freed memory for the next step instead of returning it"),
    Setting("cache_dir", "MINFLUX_CACHE_DIR", os.path.expanduser, None, "a directory", False,
            "the root of minflux's caches (kernels, product calibration)",
            "$XDG_CACHE_HOME/minflux or ~/.cache/minflux", live=True),
    Setting("mpi", "MINFLUX_MPI", _boolean, False, _BOOLEAN, False,
            "join an MPI job even where no launcher variable says so"),
    Setting("collective_timeout", "MINFLUX_COLLECTIVE_TIMEOUT", _seconds, 600.0,
            "a number of seconds (0 or less: wait forever)", False,
            "seconds an MPI collective may take before the job is aborted"),
)
SETTINGS_BY_NAME = {s.name: s for s in SETTINGS}
_RECORDED = tuple(s for s in SETTINGS if s.recorded)

_set: dict[str, Any] = {}      # what `set` gave
_values: dict[str, Any] = {}   # the value of every setting read so far (what `set` gave, or the environment's)


def get(name: str):
    """The setting's value now (see the module docstring).

    >>> get("fusion") in (True, False)
    True
    """
    try:
        return _values[name]
    except KeyError:
        pass
    setting = SETTINGS_BY_NAME[name]
    text = os.environ.get(setting.variable, "").strip()
    value = setting.parse_text(text) if text else setting.default_value()
    if not setting.live:
        _values[name] = value
    return value


def set(name: str, value) -> None:
    """Set a setting for this process (over its environment variable). Values are checked by the
    module function that wraps each setting (`mf.set_num_threads`, ...); this stores them.

    >>> before = get("compile_check")
    >>> set("compile_check", True); get("compile_check")
    True
    >>> unset("compile_check"); get("compile_check") == before
    True
    """
    if name not in SETTINGS_BY_NAME:
        raise KeyError(f"minflux has no setting {name!r}; the settings are {', '.join(SETTINGS_BY_NAME)}")
    _set[name] = _values[name] = value


def chosen(name: str) -> bool:
    """True when the setting was given: by `set`, or in its environment variable.

    >>> chosen("compile_check") in (True, False)
    True
    """
    return name in _set or bool(os.environ.get(SETTINGS_BY_NAME[name].variable, "").strip())


def unset(name: str) -> None:
    """Forget what `set` gave and what was read: the environment variable (or the default) decides
    again at the next use."""
    _set.pop(name, None)
    _values.pop(name, None)


def snapshot() -> tuple:
    """``(name, value)`` of every setting a recording depends on."""
    return tuple([(s.name, get(s.name)) for s in _RECORDED])


def table() -> str:
    """The settings as a Markdown table (variable, accepted values, default, recorded, meaning).

    >>> table().splitlines()[2].startswith("| `MINFLUX_FUSION` |")
    True
    """
    rows = ["| variable | accepts | default | a recording depends on it | what it sets |", "|---|---|---|---|---|"]
    for s in SETTINGS:
        rows.append(f"| `{s.variable}` | {s.accepts} | {s.default_description()} | "
                    f"{'yes' if s.recorded else 'no'} | {s.meaning} |")
    return "\n".join(rows)

