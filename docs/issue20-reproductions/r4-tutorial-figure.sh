#!/bin/bash
# Issue 20 point 4: a tutorial notebook that re-saves its figure, and a second notebook in the
# same folder. Run, then run again with nothing edited by the user.
. "$(dirname "$0")/lib.sh"
cd "$W"
mkdir -p tutorial/fig; printf 'old figure' > tutorial/fig/plot.png
mknb tutorial/01-plot.ipynb "import time
open('fig/plot.png', 'wb').write(str(time.time()).encode())"
mknb tutorial/03-other.ipynb "print('beside')"
for i in 1 2; do
  step nbv run tutorial --local --no-build --data-dir "$W/data" -o json
  nbv run tutorial --local --no-build --data-dir "$W/data" -o json 2>/dev/null | verdicts; echo "  exit ${PIPESTATUS[0]}"
  echo "  tutorial/fig/plot.png now holds: $(cat tutorial/fig/plot.png)"
done
