#!/usr/bin/env bash
# `spindle bench s3` against versitygw's own posix gateway (the version in
# go.mod) on this machine, its root on /dev/shm: the S3 front end Spindle
# builds on, over a local filesystem with no replication and no fsync, as a
# reference for the S3 layer's cost (issue 13's closing figures). Then the
# same bench against Spindle's embedded server (3 replicas, /dev/shm) with
# its key-client baseline, one after the other.
#   make bench-s3-versitygw      SIZES="1MiB 4KiB" OBJECTS=300 CONCURRENCY=16
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=${SIZES:-"1MiB 4KiB"}
OBJECTS=${OBJECTS:-300}
CONCURRENCY=${CONCURRENCY:-16}
source scripts/versitygw.sh
WORK=$(mktemp -d /tmp/spindle-vgw-bench.XXXXXX)
SHM=$(mktemp -d /dev/shm/spindle-vgw-bench.XXXXXX)
VGW=""
cleanup() {
  rc=$?
  stop_group "$VGW"
  rm -rf "$WORK" "$SHM"
  exit $rc
}
trap cleanup EXIT
versitygw_ensure "$WORK" s3-bench-versitygw
go build -o "$WORK/spindle" ./cmd/spindle
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
AK=AKIAVERSITYGWBENCH01 SK=versitygw-bench-secret-0123456789abcdef
mkdir -p "$SHM/posix"
setsid env -u AWS_CA_BUNDLE "$VGW_BIN" --port "127.0.0.1:$PORT" --access "$AK" --secret "$SK" posix "$SHM/posix" >"$WORK/vgw.log" 2>&1 &
VGW=$!
EP="http://127.0.0.1:$PORT"
for _ in $(seq 60); do
  curl -s -o /dev/null "$EP/" && break
  kill -0 "$VGW" 2>/dev/null || { tail -5 "$WORK/vgw.log"; echo "s3-bench-versitygw: versitygw ended"; exit 1; }
  sleep 0.5
done
echo "# $(date -u +%FT%TZ) $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); versitygw ($VGW_BIN) posix on /dev/shm vs spindle bench s3 (embedded, 3 replicas, /dev/shm)"
for size in $SIZES; do
  for op in put get; do
    echo "## $op $size, $OBJECTS objects, concurrency $CONCURRENCY"
    env -u AWS_CA_BUNDLE "$WORK/spindle" bench s3 --endpoint "$EP" --access-key "$AK" --secret-key "$SK" \
      --op "$op" --size "$size" --objects "$OBJECTS" --concurrency "$CONCURRENCY" --rounds 1 --prefix "vgw-$op-$size/" 2>"$WORK/bench.err" |
      grep -E "^ *(scenario|s3)|MB/s" || { tail -5 "$WORK/bench.err"; exit 1; }
    "$WORK/spindle" bench s3 --dir "$SHM/spindle" --op "$op" --size "$size" --objects "$OBJECTS" --concurrency "$CONCURRENCY" 2>"$WORK/bench.err" |
      grep -E "^ *(scenario|s3)|MB/s|baseline" || { tail -5 "$WORK/bench.err"; exit 1; }
    rm -rf "$SHM/spindle"
  done
done
