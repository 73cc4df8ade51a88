#!/bin/bash
# Issue 20 point 5: a server whose job store is not an SQLite database; then the file is moved aside.
. "$(dirname "$0")/lib.sh"
D=$W/data; mkdir -p "$D" "$W/root"
$PY -c 'import sys; open(sys.argv[1], "wb").write(b"this is not an SQLite database, it is garbage " * 100)' "$D/nbvalidation.db"
mknb "$W/root/nb.ipynb" "print('fine')"
start_server "$W/root" "$D"
SPEC='{"notebook": {"path": "nb.ipynb"}, "podConfig": {"buildConfig": {"enabled": false}}}'
sleep 3
for call in "GET health" "GET jobs" "POST jobs $SPEC" "POST unchanged $SPEC" "GET jobs/nb-1"; do
  set -- $call; m=$1; p=$2; shift 2
  step "$m $p"; echo "  $(api "$m" "$p" "${*:-}")"
done
step "mv nbvalidation.db nbvalidation.corrupt; wait 30 s; GET health"
mv "$D/nbvalidation.db" "$D/nbvalidation.corrupt"; sleep 30
echo "  $(api GET health)"
step "POST jobs $SPEC"; echo "  $(api POST jobs "$SPEC")"
