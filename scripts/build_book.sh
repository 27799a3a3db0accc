#!/usr/bin/env bash
# Strict, executed build of the book into _build/html.
# The execution cache (_build/.jupyter_cache) is keyed by each notebook's code; it is cleared here when the
# behaviour of the helper package or the pinned environment changes (posgeom_utils.repro.sources.package_hash),
# so a cached page never shows results of old code.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
mkdir -p _build
stamp=_build/.posgeom-env-hash
hash=$("$PY" -m posgeom_utils.repro.sources)  # normalised package code + pins (docstrings, comments, layout do not count)
if [ -d _build/.jupyter_cache ] && [ "$(cat "$stamp" 2>/dev/null)" != "$hash" ]; then
  echo "posgeom_utils or requirements changed since the last build: clearing the execution cache"
  rm -rf _build/.jupyter_cache
fi
start=$(date +%s)
# -W: warnings are errors; -n: nitpicky references; --keep-going: report every problem, then fail.
"$(dirname "$PY")/jupyter-book" build . -W -n --keep-going 2>&1 | tee _build/build.log
echo "$hash" > "$stamp"
echo "book built in $(( $(date +%s) - start )) s: _build/html/index.html"
