# Sourced by the scripts that run versitygw (s3-versitygw-suite.sh,
# s3-bench-versitygw.sh), from the repository's root: the version in
# go.mod, built once into the user's cache.
#   versitygw_ensure WORKDIR NAME   sets VGW_BIN and VGW_VERSION (exits 1 when it cannot be built)
#   stop_group PID                  TERM, then KILL after 10 s, a process group the script started
versitygw_ensure() {
  local work=$1 name=$2 ver cache
  ver=$(awk '$1=="github.com/versity/versitygw"{print $2}' go.mod)
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/spindle/versitygw-$ver
  if [[ ! -x "$cache/versitygw" ]]; then
    echo "building versitygw $ver into $cache (once; a few minutes)"
    mkdir -p "$cache"
    (cd "$work" && GOFLAGS=-mod=mod GOBIN="$cache" go install "github.com/versity/versitygw/cmd/versitygw@$ver") >"$work/build.log" 2>&1 ||
      { tail -5 "$work/build.log"; echo "$name: could not build versitygw $ver"; exit 1; }
  fi
  VGW_BIN=$cache/versitygw VGW_VERSION=$ver
}

stop_group() {
  local pid=$1
  [[ -n "$pid" ]] || return 0
  kill -TERM -- -"$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -9 -- -"$pid" 2>/dev/null || true
}
