"""Reading the compiler's integer settings from the environment, with errors that name the fix."""
from __future__ import annotations

import os


def positive_int_from_environment(name: str, default: int, meaning: str) -> int:
    """``$name`` as an int of at least 1, or ``default`` when it is unset or empty; ``meaning`` says in
    the error what the setting is, e.g. ``"the number of threads minflux may use"``.

    >>> positive_int_from_environment("MINFLUX_SETTING_THAT_IS_NOT_SET", 7, "a count")
    7
    """
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not an integer; set it to {meaning} (at least 1), or unset "
                         "it for the default") from None
    if value < 1:
        raise ValueError(f"{name}={text!r} must be at least 1 ({meaning})")
    return value
