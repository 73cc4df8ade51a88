#!/bin/bash
# Issue 20 point 5: the disk fills while a cell runs (a 8 MiB tmpfs holds the project and the data
# dir's jobs/; the store stays on the ordinary disk). The cell fills it, gets ENOSPC, frees it.
. "$(dirname "$0")/lib.sh"
S=$W/small; mkdir -p "$S"
mount -t tmpfs -o size=8m tmpfs "$S"; trap 'umount -l "$S"' EXIT
mkdir -p "$W/data" "$S/jobs"; ln -s "$S/jobs" "$W/data/jobs"
cd "$S"
FILL="import os
path = 'filler'
try:
    with open(path, 'wb') as f:
        while True:
            f.write(b'x' * 65536)
            f.flush()
finally:
    os.remove(path)"
mknb nbs/full.ipynb "$FILL"
step nbv run nbs --local --no-build --data-dir "$W/data" --junitxml "$W/junit.xml"
nbv run nbs --local --no-build --data-dir "$W/data" --junitxml "$W/junit.xml" 2>&1 | grep -v '^$' | sed 's/^/  /'; echo "  exit ${PIPESTATUS[0]}"
$PY -c 'import sys, xml.etree.ElementTree as ET; s = ET.parse(sys.argv[1]).getroot().find("testsuite"); c = s.find("testcase"); e = c.find("failure") if c.find("failure") is not None else c.find("error"); print("  JUnit: failures=%s errors=%s <%s type=%r>" % (s.get("failures"), s.get("errors"), e.tag, e.get("type")))' "$W/junit.xml"
# the verdict cache: succeed while a flag (in the root, outside the notebook's folder) is absent; fill with it
mknb nbs/full.ipynb "import os
if os.path.exists('../fill-now'):
$(echo "$FILL" | sed 's/^/    /')"
step "nbv run nbs (no flag)"; nbv run nbs --local --no-build --data-dir "$W/data" -o json 2>/dev/null | verdicts
touch fill-now
step "touch fill-now; nbv run nbs --no-cache"; nbv run nbs --local --no-build --data-dir "$W/data" -o json --no-cache 2>/dev/null | verdicts
step "nbv run nbs (the disk still fills)"; nbv run nbs --local --no-build --data-dir "$W/data" -o json 2>/dev/null | verdicts; echo "  exit ${PIPESTATUS[0]}"
