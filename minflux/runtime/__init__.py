"""minflux's runtime: what the process is set to and the machinery every layer above runs on.

`settings` (every knob, its variable and whether a recorded schedule depends on it;
``python -m minflux.runtime.settings_report`` prints them), `threads` (the
thread budget) and `row_pool` (the sleeping pool that large kernels and products split over),
`pointers` (array addresses for C calls), `kernel_loader`, `kernel_cache` and `cache_directory`
(generated kernels loaded, cached on disk and linked back from a trusted directory), `allocator`
(glibc's keeping of freed memory), and the product provider (`gemm_provider`, `gemm_choice`,
``python -m minflux.runtime.gemm_report``). It imports nothing else of minflux but `minflux.files`
and `minflux._version`; the compiler and every layer above read their settings from it.

>>> from minflux.runtime import settings
>>> settings.get("num_threads") >= 1
True
"""
from . import settings
from .settings import SettingError

__all__ = ["SettingError", "settings"]
