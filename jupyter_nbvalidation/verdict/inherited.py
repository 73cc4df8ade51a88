"""What a kernel inherits from the process that starts it: the locale (``LANG``,
``LANGUAGE``, ``LC_*``) and the time zone (``TZ``). The runner passes exactly these
through to the kernel (runner/environment.py), and the verdict cache's key covers
their values (verdict/cache.py): one list for both. Standard library only (the runner
imports it: runner.SHARED_MODULES)."""

from __future__ import annotations

# by name; every ``LC_*`` variable too
PASSED_THROUGH = ("LANG", "LANGUAGE", "TZ")
