#!/usr/bin/env bash
# Runs every native Go fuzz target of the repository (every `func FuzzXxx` in
# a *_test.go file), one at a time, for FUZZTIME each (default 10s).
# Usage: scripts/fuzz.sh [REGEXP]   only targets whose name matches REGEXP.
# Exits non-zero, listing them, if any target found a failing input (go test
# saves it under the package's testdata/fuzz/ for a regression test).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-10s}
filter=${1:-.}

# Lines like "./internal/units/units_test.go:func FuzzParseBytes".
mapfile -t targets < <(grep -r -o --include='*_test.go' \
  --exclude-dir=.git --exclude-dir=testdata --exclude-dir=vendor \
  '^func Fuzz[A-Za-z0-9_]*' . | sort -u)

ran=0
failed=()
for t in "${targets[@]}"; do
  file=${t%%:*}
  name=${t##*func }
  [[ $name =~ $filter ]] || continue
  pkg=./$(dirname "${file#./}")
  echo "=== fuzz $pkg $name for $FUZZTIME"
  if ! "$GO" test -run='^$' -fuzz="^${name}\$" -fuzztime="$FUZZTIME" "$pkg"; then
    failed+=("$pkg $name")
  fi
  ran=$((ran + 1))
done

echo "fuzz: ran $ran target(s) for $FUZZTIME each"
if [[ ${#failed[@]} -gt 0 ]]; then
  printf 'fuzz: FAILED %s\n' "${failed[@]}"
  exit 1
fi
