"""``python -m minflux.runtime.settings_report``: every minflux setting, its environment variable, the
values it accepts, its default and whether a recorded step depends on it (`minflux.runtime.settings`)."""
from __future__ import annotations

from .settings import table


def main() -> int:
    """Print the settings table.

    >>> main()  # doctest: +ELLIPSIS
    | variable | accepts | default | a recording depends on it | what it sets |
    ...
    0
    """
    print(table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
