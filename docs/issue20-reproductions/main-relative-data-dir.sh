#!/bin/bash
# Not an issue-20 reproduction: `run --data-dir` given as a relative path, with the default sandbox.
. "$(dirname "$0")/lib.sh"
cd "$W"
mknb nbs/nb.ipynb "print(1)"
step nbv run nbs --local --no-build --data-dir data
nbv run nbs --local --no-build --data-dir data; echo "  exit $?"
step nbv run nbs --local --no-build --data-dir "$W/data2"
nbv run nbs --local --no-build --data-dir "$W/data2"; echo "  exit $?"
