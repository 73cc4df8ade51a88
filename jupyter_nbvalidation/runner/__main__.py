"""``python -m jupyter_nbvalidation.runner NOTEBOOK ...`` (see :mod:`.cli`), or
``python -m jupyter_nbvalidation.runner --pool-slot SLOT.json``: a pre-started kernel (see :mod:`.pool`)."""

import sys

from jupyter_nbvalidation.runner.cli import main

if __name__ == "__main__":
    if sys.argv[1:2] == ["--pool-slot"]:
        import jupyter_nbvalidation.runner.pool as pool  # deferred: only the pre-started mode needs it

        sys.exit(pool.main(sys.argv[2:]))
    sys.exit(main())
