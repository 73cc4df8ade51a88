"""``python -m jupyter_nbvalidation.runner NOTEBOOK ...`` (see :mod:`.cli`)."""

import sys

from .cli import _skip_slow_optional_imports, main

if __name__ == "__main__":
    _skip_slow_optional_imports()
    sys.exit(main())
