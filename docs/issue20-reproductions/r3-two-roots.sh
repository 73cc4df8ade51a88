#!/bin/bash
# Issue 20 point 3: a server on root A and an in-process `run` in folder B share one data dir;
# each root has its own report.ipynb (A's fails, B's succeeds). Then `run` of a folder outside
# the running server's root.
. "$(dirname "$0")/lib.sh"
A=$W/A; B=$W/B; D=$W/data
mknb "$A/report.ipynb" "raise ValueError('A is broken')"
mknb "$B/report.ipynb" "print('B is fine')"
# the same notebook in the same folder name in both roots; it reads a file of its root, beside the folder
CHECK="import os
assert not os.path.exists('../broken'), 'this root is broken'"
mknb "$A/nbs/check.ipynb" "$CHECK"; mknb "$B/nbs/check.ipynb" "$CHECK"; touch "$A/broken"
start_server "$A" "$D"
export JUPYTER_RUNTIME_DIR=$W/runtime
cd "$A"; step "(in A) nbv run report.ipynb --no-build -o json    # through the server"
nbv run report.ipynb --no-build -o json 2>/dev/null | verdicts; echo "  exit ${PIPESTATUS[0]}"
cd "$B"; step "(in B) nbv run report.ipynb --no-build --local --data-dir $D -o json"
nbv run report.ipynb --no-build --local --data-dir "$D" -o json 2>/dev/null | verdicts; echo "  exit ${PIPESTATUS[0]}"
step "GET jobs?notebook=report.ipynb on A's server"
api GET 'jobs?notebook=report.ipynb' >/dev/null
$PY -c 'import json,sys; [print("  ", j["metadata"]["name"], (j.get("status") or {}).get("phase")) for j in json.load(open(sys.argv[1]))["items"]]' "$W/body"
cd "$A"; step "(in A) nbv run report.ipynb --no-build -o json    # through the server, again"
nbv run report.ipynb --no-build -o json 2>/dev/null | verdicts; echo "  exit ${PIPESTATUS[0]}"
cd "$A"; step "(in A) nbv run nbs/check.ipynb --no-build -o json    # through the server: A is broken"
nbv run nbs/check.ipynb --no-build -o json 2>/dev/null | verdicts; echo "  exit ${PIPESTATUS[0]}"
cd "$B"; step "(in B) nbv run nbs/check.ipynb --no-build --local --data-dir $D -o json"
nbv run nbs/check.ipynb --no-build --local --data-dir "$D" -o json 2>/dev/null | verdicts; echo "  exit ${PIPESTATUS[0]}"
cd "$A"; step "(in A) nbv run nbs/check.ipynb --no-build -o json    # through the server, A still broken"
nbv run nbs/check.ipynb --no-build -o json 2>/dev/null | verdicts; echo "  exit ${PIPESTATUS[0]}"
step "(in A) nbv run $B --no-build --data-dir $W/other-data -o json    # a folder outside the server's root"
nbv run "$B" --no-build --data-dir "$W/other-data" -o json 2>"$W/err" | verdicts; echo "  exit ${PIPESTATUS[0]}"
echo "  stderr: $(cat "$W/err")"
