#!/usr/bin/env bash
# Whole-book build benchmark: a cold build (empty execution cache, empty marginals cache) and a rebuild
# with nothing changed, both into a scratch folder so the working _build is left alone.
# Targets (issue 2): cold < 10 minutes on a 2-core machine, unchanged rebuild < 30 s.
#   usage: POSGEOM_DATA_DIR=/path/to/data bash benchmarks/bench_build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
JB=${JB:-.venv/bin/jupyter-book}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export POSGEOM_CACHE_DIR="$scratch/cache" POSGEOM_PROGRESS=0
unset MPLBACKEND

run() {
  local start end
  start=$(date +%s.%N)
  "$JB" build . -W -n --keep-going --path-output "$scratch/out" > "$scratch/$1.log" 2>&1
  end=$(date +%s.%N)
  python3 -c "print(f'{float($end) - float($start):.1f}')"
}
cold=$(run cold)
warm=$(run warm)
chapters=$(ls notebooks/*.md | wc -l)
echo "cores=$(nproc) chapters=$chapters"
echo "cold build (empty caches):     ${cold} s   (target < 600 s)"
echo "rebuild, nothing changed:      ${warm} s   (target < 30 s)"
python3 - "$cold" "$warm" <<'PY'
import sys
cold, warm = map(float, sys.argv[1:])
print(f"rebuild / cold ratio:          {warm / cold:.3f}")
sys.exit(0 if cold < 600 and warm < 30 else 1)
PY
