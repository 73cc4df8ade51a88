# Shared by the issue-20 reproduction scripts. SRC=/work/wt-old (16b2236) or /work/main.
# Runs the package found at $SRC with the main checkout's venv (PYTHONPATH first on sys.path).
set -u
SRC=${SRC:?set SRC=/work/wt-old or SRC=/work/main}
VENV=${VENV:-/work/main/.venv}
PY=$VENV/bin/python
export PYTHONPATH=$SRC PYTHONDONTWRITEBYTECODE=1
WHICH=$($PY -c 'import jupyter_nbvalidation, os; print(os.path.dirname(os.path.dirname(jupyter_nbvalidation.__file__)))')
[ "$WHICH" = "$SRC" ] || { echo "imports $WHICH, not $SRC" >&2; exit 99; }
W=$(mktemp -d "${TMPBASE:-${TMPDIR:-/tmp}}/$(basename "$0" .sh).XXXX")
export JUPYTER_RUNTIME_DIR=$W/no-servers
echo "# SRC=$SRC ($(git -C "$SRC" rev-parse --short HEAD)), work dir $W"

nbv() { "$VENV/bin/jupyter" nbvalidation "$@" </dev/null; }
# mknb PATH SOURCE... : a notebook of code cells
mknb() { $PY - "$@" <<'PYEOF'
import sys, pathlib, nbformat
p = pathlib.Path(sys.argv[1]); p.parent.mkdir(parents=True, exist_ok=True)
nb = nbformat.v4.new_notebook(); nb.cells = [nbformat.v4.new_code_cell(s) for s in sys.argv[2:]]
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbformat.write(nb, str(p))
PYEOF
}
# verdicts: the JSON rows of `run -o json` as "notebook verdict firstFailure" lines
verdicts() { $PY -c 'import json,sys; [print(" ", r["notebook"], r["verdict"], r.get("firstFailure","")) for r in json.load(sys.stdin)]'; }
step() { echo; echo "\$ $*"; }
# start_server ROOT DATA [extra args]: a `jupyter server` with the extension on loopback, in the
# background (pid in SERVER_PID, URL in SERVER_URL, token in SERVER_TOKEN); runtime file in $W/runtime
start_server() {
  local root=$1 data=$2; shift 2
  SERVER_TOKEN=repro$$; SERVER_PORT=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  SERVER_URL=http://127.0.0.1:$SERVER_PORT/
  mkdir -p "$W/runtime"
  JUPYTER_RUNTIME_DIR=$W/runtime $PY -m jupyter_server --no-browser --allow-root --port=$SERVER_PORT --ip=127.0.0.1 \
    --ServerApp.token=$SERVER_TOKEN --ServerApp.root_dir="$root" --LocalBackend.data_dir="$data" \
    --ServerApp.port_retries=0 "$@" >"$W/server.log" 2>&1 </dev/null &
  SERVER_PID=$!
  trap 'kill $SERVER_PID 2>/dev/null; wait $SERVER_PID 2>/dev/null' EXIT
  for _ in $(seq 120); do api GET health >/dev/null 2>&1 && return 0; sleep 0.5; done
  echo "server did not come up"; tail -20 "$W/server.log"; exit 98
}
# api METHOD PATH [JSON]: the server's REST API; prints "HTTP <code> <body>"
api() {
  curl -s -o "$W/body" -w '%{http_code}' -X "$1" -H "Authorization: token $SERVER_TOKEN" \
    -H 'Content-Type: application/json' ${3:+--data "$3"} "${SERVER_URL}nbvalidation/api/v1/$2" > "$W/code"
  local code; code=$(cat "$W/code"); echo "HTTP $code $(head -c 400 "$W/body")"; [ "$code" = 200 ]
}
