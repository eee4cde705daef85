#!/usr/bin/env bash
# `spindle bench s3 --endpoint --server-pid` against MinIO and SeaweedFS on
# this machine (issue 36 item 4), one server at a time, data on /dev/shm,
# after Spindle itself (scripts/s3-cpu.sh: 3 meta members): the same client,
# objects per second and the server's CPU per object, by process.
#   make bench-s3-peers   PEERS="minio seaweedfs" SIZES="1MiB 4KiB" ROUNDS=3 SPINDLE_AT=first|last
# prints each run, then the median (min-max) of each store's objects per
# second and server CPU per object over the rounds (scripts/s3-peers-summary.py).
# TLS=1 measures HTTPS: Spindle with its default mutual TLS (s3-cpu.sh
# TLS=1), MinIO with a self-signed certificate for 127.0.0.1 (openssl);
# SeaweedFS is left out then (its S3 HTTPS needs a security.toml of its
# own: not set up here), and says so.
# Installs the peers from the Go module proxy into $PEER_BIN (default
# ~/.cache/spindle-s3-peers) the first time (a few minutes of compiling
# each; never in make test):
#   minio:     go install github.com/minio/minio@$MINIO_VERSION (default
#              latest: the proxy lists no semver release, MinIO tags
#              RELEASE.*; latest resolves to a pseudo-version of master);
#              one node, 4 drives on /dev/shm (erasure-coded 2+2).
#   seaweedfs: its go.mod has a replace directive, so `go install @version`
#              refuses it: the module is downloaded (go mod download) and
#              weed built in it; `weed server -s3`, one volume server (one
#              copy, no fsync).
set -euo pipefail
cd "$(dirname "$0")/.."
PEERS=${PEERS:-"minio seaweedfs"}
SPINDLE_AT=${SPINDLE_AT:-first} # last: after the peers, in the first round
ROUNDS=${ROUNDS:-1}              # rounds, in alternating order; a summary of medians after
SIZES=${SIZES:-"1MiB 4KiB"}
OPS=${OPS:-"put get"}
OBJECTS_1MiB=${OBJECTS_1MiB:-1000}
OBJECTS_4KiB=${OBJECTS_4KiB:-5000}
CONCURRENCY=${CONCURRENCY:-16}
MINIO_VERSION=${MINIO_VERSION:-latest}
SEAWEEDFS_VERSION=${SEAWEEDFS_VERSION:-v0.0.0-20261109003541-7506e5f91cd6}
PEER_BIN=${PEER_BIN:-$HOME/.cache/spindle-s3-peers}
TLS=${TLS:-}
SHM=$(mktemp -d /dev/shm/spindle-s3-peers.XXXXXX)
PID=""
stop_peer() {
  if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
  fi
  PID=""
  rm -rf "$SHM/minio" "$SHM/weed" # (the next round's server starts empty)
}
cleanup() {
  rc=$?
  stop_peer
  rm -rf "$SHM"
  exit $rc
}
trap cleanup EXIT
go build -o "$SHM/spindle" ./cmd/spindle
mkdir -p "$PEER_BIN"
install_peer() {
  case $1 in
  minio)
    [ -x "$PEER_BIN/minio" ] || GOBIN="$PEER_BIN" go install "github.com/minio/minio@$MINIO_VERSION"
    ;;
  seaweedfs)
    if [ ! -x "$PEER_BIN/weed" ]; then
      dir=$(cd "$SHM" && go mod download -json "github.com/seaweedfs/seaweedfs@$SEAWEEDFS_VERSION" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
      (cd "$dir" && go build -o "$PEER_BIN/weed" ./weed)
    fi
    ;;
  esac
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
AK=s3peersbench SK=s3peers-bench-secret-0123456789
CA=()
start_peer() {
  local port
  port=$(free_port)
  EP="http://127.0.0.1:$port" CA=()
  case $1 in
  minio)
    mkdir -p "$SHM/minio"/d{1,2,3,4} "$SHM/minio/certs"
    if [ "$TLS" = 1 ]; then
      openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=127.0.0.1 \
        -addext subjectAltName=IP:127.0.0.1 -keyout "$SHM/minio/certs/private.key" -out "$SHM/minio/certs/public.crt" 2>/dev/null
      EP="https://127.0.0.1:$port" CA=(--endpoint-ca "$SHM/minio/certs/public.crt")
    fi
    MINIO_ROOT_USER=$AK MINIO_ROOT_PASSWORD=$SK MINIO_UPDATE=off setsid "$PEER_BIN/minio" server --quiet --address "127.0.0.1:$port" \
      --certs-dir "$SHM/minio/certs" --console-address "127.0.0.1:$(free_port)" "$SHM/minio/d{1...4}" >"$SHM/peer.log" 2>&1 &
    ;;
  seaweedfs)
    mkdir -p "$SHM/weed"
    printf '{"identities":[{"name":"bench","credentials":[{"accessKey":"%s","secretKey":"%s"}],"actions":["Admin","Read","Write","List","Tagging"]}]}' "$AK" "$SK" >"$SHM/weed.json"
    # Each gRPC port explicit: weed's default is the HTTP port + 10000,
    # past 65535 for a port the kernel picks high (weed panicked). No
    # telemetry: the bench sends nothing off this machine.
    setsid "$PEER_BIN/weed" server -dir="$SHM/weed" -ip=127.0.0.1 -master.telemetry=false \
      -master.port="$(free_port)" -master.port.grpc="$(free_port)" -volume.port="$(free_port)" -volume.port.grpc="$(free_port)" \
      -filer -filer.port="$(free_port)" -filer.port.grpc="$(free_port)" -s3 -s3.port="$port" -s3.port.grpc="$(free_port)" \
      -s3.config="$SHM/weed.json" >"$SHM/peer.log" 2>&1 &
    ;;
  esac
  PID=$!
  for _ in $(seq 300); do
    curl -sk -o /dev/null "$EP/" && return 0
    kill -0 "$PID" 2>/dev/null || { tail -5 "$SHM/peer.log"; echo "s3-peers: $1 ended"; exit 1; }
    sleep 0.2
  done
  echo "s3-peers: $1 not answering at $EP after 60 s"
  exit 1
}
run_spindle() {
  echo "# spindle (scripts/s3-cpu.sh: spindle server$([ "$TLS" = 1 ] || echo " --insecure") --meta-replicas 3 on /dev/shm)"
  TLS="$TLS" BIN="$SHM/spindle" SIZES="$SIZES" OPS="$OPS" OBJECTS_1MiB=$OBJECTS_1MiB OBJECTS_4KiB=$OBJECTS_4KiB CONCURRENCY=$CONCURRENCY scripts/s3-cpu.sh
}
run_peers() {
  for peer in $PEERS; do
    if [ "$TLS" = 1 ] && [ "$peer" = seaweedfs ]; then
      echo "# seaweedfs left out with TLS=1: its S3 HTTPS needs a security.toml this script does not write"
      continue
    fi
    install_peer "$peer"
    start_peer "$peer"
    echo "# $(date -u +%FT%TZ) $peer at $EP, load $(cut -d' ' -f1-3 /proc/loadavg)"
    for size in $SIZES; do
      var="OBJECTS_${size}"
      for op in $OPS; do
        echo "## $op $size, ${!var} objects, concurrency $CONCURRENCY"
        "$SHM/spindle" bench s3 --endpoint "$EP" "${CA[@]}" --access-key "$AK" --secret-key "$SK" --server-pid "$PID" \
          --op "$op" --size "$size" --objects "${!var}" --concurrency "$CONCURRENCY" --duration 40s \
          --prefix "peers-$op-$size-$RANDOM/" 2>"$SHM/bench.err" |
          grep -E "^ *(scenario|s3-)|server cpu" || { tail -5 "$SHM/bench.err"; exit 1; }
      done
    done
    stop_peer
  done
}
# Rounds alternate the order (Spindle first, then last, ...; SPINDLE_AT
# gives the first round's), so that neither side always runs on a machine
# the other just warmed or filled.
# Everything printed from here is kept for the summary too (in this shell:
# a pipeline's subshell would hide the peer's PID from cleanup).
exec 3>&1 > >(tee "$SHM/rounds.log")
TEE=$!
for round in $(seq "$ROUNDS"); do
  echo "# round $round of $ROUNDS"
  first=$SPINDLE_AT
  if [ $((round % 2)) = 0 ]; then
    [ "$SPINDLE_AT" = last ] && first=first || first=last
  fi
  if [ "$first" = last ]; then
    run_peers
    run_spindle
  else
    run_spindle
    run_peers
  fi
done
exec >&3 3>&-
for _ in $(seq 100); do kill -0 "$TEE" 2>/dev/null || break; sleep 0.1; done # tee wrote all
python3 scripts/s3-peers-summary.py "$SHM/rounds.log"
