#!/usr/bin/env bash
# Server CPU per S3 operation, per process (issue 36 item 1): starts
# `spindle server --insecure --meta-replicas 3` on /dev/shm (a gateway in the
# server process, three `spindle meta` members, three datanodes), then runs
# `spindle bench s3 --endpoint ... --server-pid` for PUT and GET of each
# size, one at a time: each prints the CPU the server's processes used over
# its timed loop, in all and by process (µs per op; CPU-s per GB). CPU time
# holds still on a loaded machine where throughput does not; compare builds
# by alternating runs (BIN=... of each).
#   make bench-s3-cpu    SIZES="1MiB 4KiB" OBJECTS_1MiB=1000 OBJECTS_4KiB=6000
# TLS=1 runs the server with its default mutual TLS (no --insecure): the
# S3 endpoint is https, its certificate checked against the server's CA.
# Without TLS each run also prints the meta requests it caused, by route,
# per object (all members' spindle_meta_request_seconds_count, before and
# after; a GET run's objects are put first and every run deletes its
# objects at its end, so those routes show too).
# SERVER_ENV="NAME=VALUE ..." is the server's environment (its meta members
# and datanodes inherit it), e.g. SERVER_ENV=GOMAXPROCS=1.
# PERF=DIR also records `perf record -g` of the server processes during each
# timed GET/PUT loop (PERF_DELAY seconds after it starts, for PERF_SECONDS)
# into DIR/<op>-<size>.data; read with
#   perf report -i DIR/put-1MiB.data --no-children --sort comm,pid,sym
# (comm is spindle for each: the pid tells which; the header lists them), or
# by stage with scripts/s3-stages.py. perf takes about a second to attach:
# give the loop several seconds (OBJECTS_*), or the window reaches past its
# end into the bench's deletion of its objects.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=${SIZES:-"1MiB 4KiB"}
OPS=${OPS:-"put get"}
CONCURRENCY=${CONCURRENCY:-16}
META_REPLICAS=${META_REPLICAS:-3}
TLS=${TLS:-}
BIN=${BIN:-}
PERF=${PERF:-}
PERF_DELAY=${PERF_DELAY:-0.5}
PERF_SECONDS=${PERF_SECONDS:-2}
SHM=$(mktemp -d /dev/shm/spindle-s3cpu.XXXXXX)
SRV=""
cleanup() {
  rc=$?
  if [ -n "$SRV" ] && kill -0 "$SRV" 2>/dev/null; then
    kill -TERM "$SRV" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$SRV" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -rf "$SHM"
  exit $rc
}
trap cleanup EXIT
if [ -z "$BIN" ]; then
  go build -o "$SHM/spindle" ./cmd/spindle
  BIN="$SHM/spindle"
fi
AK=s3cpubench SK=s3cpu-bench-secret-0123456789abcdef
MODE=--insecure SCHEME=http
[ "$TLS" = 1 ] && MODE="" SCHEME=https
setsid env ${SERVER_ENV:-} "$BIN" server ${MODE:+$MODE }--meta-replicas "$META_REPLICAS" --dir "$SHM/srv" --meta-listen 127.0.0.1:0 \
  --s3-listen 127.0.0.1:0 --console-listen off --s3-access-key "$AK" --s3-secret-key "$SK" \
  --ready-file "$SHM/ready" >"$SHM/server.log" 2>&1 &
SRV=$!
for _ in $(seq 300); do
  [ -s "$SHM/ready" ] && break
  kill -0 "$SRV" 2>/dev/null || { tail -5 "$SHM/server.log"; echo "s3-cpu: the server ended"; exit 1; }
  sleep 0.2
done
[ -s "$SHM/ready" ] || { echo "s3-cpu: the server was not ready in 60 s"; exit 1; }
# The gateway's port: the server process's listening port that is not a
# meta member's (it listens on port 0 and does not print the port it got).
META_PORTS=$(head -1 "$SHM/ready" | tr ',' '\n' | sed 's/.*://')
PORT=""
for p in $(ss -Hltnp | grep "pid=$SRV," | awk '{print $4}' | sed 's/.*://'); do
  grep -qx "$p" <<<"$META_PORTS" || PORT=$p
done
[ -n "$PORT" ] || { echo "s3-cpu: no S3 port found"; exit 1; }
EP="$SCHEME://127.0.0.1:$PORT"
CA=()
[ "$TLS" = 1 ] && CA=(--endpoint-ca "$SHM/srv/tls/ca/ca.crt")
echo "# $(date -u +%FT%TZ) $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); spindle server ${MODE:+$MODE }--meta-replicas $META_REPLICAS on /dev/shm; $("$BIN" version 2>/dev/null | head -1)"
# A fresh cluster's first writes cost more (its first containers): warm up.
"$BIN" bench s3 --endpoint "$EP" "${CA[@]}" --access-key "$AK" --secret-key "$SK" --op put --size 1MiB \
  --objects "${WARMUP:-300}" --prefix "s3cpu-warmup/" >/dev/null 2>&1 || { echo "s3-cpu: the warm-up failed"; exit 1; }
# meta_counts prints "route count" summed over the meta members (plaintext).
meta_counts() {
  for a in $(head -1 "$SHM/ready" | tr ',' ' '); do curl -s --max-time 5 "http://$a/metrics" || true; done |
    awk '/^spindle_meta_request_seconds_count/ { match($0, /route="[^"]*"/); c[substr($0, RSTART+7, RLENGTH-8)] += $NF }
      END { for (r in c) print r, c[r] }' | sort
}
for size in $SIZES; do
  var="OBJECTS_${size}"
  objects=${!var:-${OBJECTS:-1000}}
  for op in $OPS; do
    echo "## $op $size, $objects objects, concurrency $CONCURRENCY"
    [ "$TLS" = 1 ] || meta_counts >"$SHM/meta0"
    PERFPID=""
    args=(bench s3 --endpoint "$EP" "${CA[@]}" --access-key "$AK" --secret-key "$SK" --server-pid "$SRV"
      --op "$op" --size "$size" --objects "$objects" --concurrency "$CONCURRENCY" --duration 40s
      --prefix "s3cpu-$op-$size-$RANDOM/")
    if [ -n "$PERF" ]; then
      # Under script(1) the bench's progress line (its stderr a terminal)
      # says when the timed loop starts (a get writes its objects first).
      mkdir -p "$PERF"
      : >"$SHM/progress"
      pids=$(pgrep -d, -P "$SRV"),$SRV
      (for _ in $(seq 600); do grep -q "s3-$op 1/1" "$SHM/progress" && break; sleep 0.1; done
       sleep "$PERF_DELAY"
       perf record -q -g -p "$pids" -o "$PERF/$op-$size.data" -- sleep "$PERF_SECONDS" >/dev/null 2>&1) &
      PERFPID=$!
      script -qefc "$(printf '%q ' "$BIN" "${args[@]}")" /dev/null >"$SHM/progress" </dev/null || { tail -c 300 "$SHM/progress"; exit 1; }
      tr '\r' '\n' <"$SHM/progress" | grep -E "^ *(scenario|s3-[a-z]+ +[0-9])|server cpu"
    else
      "$BIN" "${args[@]}" 2>"$SHM/bench.err" |
        grep -E "^ *(scenario|s3-)|server cpu" || { tail -5 "$SHM/bench.err"; exit 1; }
    fi
    [ -z "$PERFPID" ] || wait "$PERFPID"
    if [ "$TLS" != 1 ]; then
      meta_counts >"$SHM/meta1"
      join -a2 -e0 -o 0,1.2,2.2 "$SHM/meta0" "$SHM/meta1" |
        awk -v n="$objects" '{ d = $3 - $2; if (d > 0) s = s sprintf(" %s %.3f", $1, d / n) } END { print "note: meta requests per object, by route (the whole run):" s }'
    fi
  done
done
