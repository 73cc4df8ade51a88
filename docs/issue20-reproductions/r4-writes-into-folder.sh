#!/bin/bash
# Issue 20 point 4: a notebook that writes into its own folder. Runs twice (the second with
# --no-cache); prints the folder after each run.
. "$(dirname "$0")/lib.sh"
cd "$W"
mknb proj/nb.ipynb "import os
os.mkdir('results')
open('results/x.txt', 'w').write('1')" "open('input.csv', 'a').write('appended\n')
os.remove('scratch.txt')"
printf 'a,b\n' > proj/input.csv; printf 'keep me\n' > proj/scratch.txt
show() { echo "  proj/ now: $(cd proj && find . -mindepth 1 -not -name '*.ipynb' | sort | tr '\n' ' ')| input.csv: $(tr '\n' '|' < proj/input.csv)"; }
show
step nbv run proj --local --no-build --data-dir "$W/data" -o json
nbv run proj --local --no-build --data-dir "$W/data" -o json 2>/dev/null | verdicts; echo "  exit ${PIPESTATUS[0]}"; show
step nbv run proj --local --no-build --data-dir "$W/data" -o json --no-cache
nbv run proj --local --no-build --data-dir "$W/data" -o json --no-cache 2>/dev/null | verdicts; echo "  exit ${PIPESTATUS[0]}"; show
