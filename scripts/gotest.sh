#!/usr/bin/env bash
# Runs `go test "$@"` (with $GO, default go), its output streamed as
# usual. When it fails it repeats, at the end, the lines that say what
# failed: each "--- FAIL" and "FAIL" line, and a timeout's "panic: test
# timed out" with the tests that were running. A timed-out test binary
# prints its goroutine dump after those lines, and a check or a CI log
# that shows only the last lines would otherwise lose them.
set -uo pipefail
log=$(mktemp "${TMPDIR:-/tmp}/spindle-gotest.XXXXXX")
trap 'rm -f "$log"' EXIT
"${GO:-go}" test "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
if [[ $status -ne 0 ]]; then
  echo "=== go test $* failed (exit $status). What failed:"
  grep -E -A3 '^panic: test timed out|^running tests:' "$log" | head -40
  grep -E '^\s*--- FAIL|^FAIL' "$log" | head -60
fi
exit "$status"
