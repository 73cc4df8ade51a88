"""``python -m jupyter_nbvalidation.runner NOTEBOOK ...`` (see :mod:`.cli`)."""

import sys

from jupyter_nbvalidation.runner.cli import main

if __name__ == "__main__":
    sys.exit(main())
