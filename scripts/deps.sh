#!/usr/bin/env bash
# Installs the Debian packages the tests and benches use, when missing:
# strace (syscall profiles) and gcc (the race detector, which make test
# runs, needs cgo). apt runs only when a package is missing and we
# are root or have password-less sudo; otherwise, or when apt fails (e.g. no
# network), a warning is printed and the script still succeeds, so that
# `make test` runs whatever does not need the package (the tests that need
# it skip, or fail under SPINDLE_REQUIRE_STRACE=1, as in CI).
set -euo pipefail

packages=(strace gcc) # one binary per package, same name; gcc: cgo, which -race needs
missing=()
for p in "${packages[@]}"; do
  command -v "$p" >/dev/null 2>&1 || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

warn() {
  local fate="skip"
  [[ ${SPINDLE_REQUIRE_STRACE:-} == 1 ]] && fate="fail (SPINDLE_REQUIRE_STRACE=1)"
  echo "warning: $*; tests that need ${missing[*]} will $fate" >&2
}

if ! command -v apt-get >/dev/null 2>&1; then
  warn "${missing[*]} missing and no apt-get"; exit 0
fi
if [[ $(id -u) -eq 0 ]]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  warn "${missing[*]} missing and neither root nor password-less sudo"; exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! { timeout 600 "${sudo[@]}" apt-get update -q &&
       timeout 600 "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"; }; then
  warn "apt-get could not install ${missing[*]}"
fi
exit 0
