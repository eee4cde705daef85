#!/usr/bin/env bash
# The S3 gateway's acceptance at full size (issue 13), with real clients
# unchanged: aws-cli from PyPI (v1) and from Debian (v2), boto3, rclone and
# curl against `spindle server --datanodes 4`, and minio-go in its Go test.
#
#   objects of 0 B, 1 B, 1 KiB, 8 MiB, 100 MiB and 1 GiB (multipart, parallel
#   parts) put and read back by every client, every byte compared; ranged
#   gets; listings of 10,000 keys with prefixes and delimiters; copy; delete;
#   presigned GET and PUT with curl; rclone sync and check of 1,000 files;
#   kill -9 of a datanode during a 1 GiB multipart upload (the client retries
#   its parts), the object then read back byte-for-byte.
#
# Needs about 8 GiB of /dev/shm (the cluster's data; objects are deleted as
# each client finishes) and 3 GiB under /tmp (the clients' files); 5-15
# minutes on a 2-core VM. Installs what is missing (a venv with awscli and
# boto3, Debian's awscli and rclone). Run: make test-s3-full
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=$(mktemp -d /tmp/spindle-s3-acceptance.XXXXXX)
SHM=$(mktemp -d /dev/shm/spindle-s3-acceptance.XXXXXX)
SRV=""
RESULT=""
cleanup() {
  rc=$?
  if [[ -n "$SRV" ]]; then
    kill -TERM -- -"$SRV" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$SRV" 2>/dev/null || break; sleep 0.2; done
    kill -9 -- -"$SRV" 2>/dev/null || true
    wait "$SRV" 2>/dev/null || true
  fi
  [[ $rc != 0 && -f "$WORK/server.log" ]] && { echo "--- last server log lines"; tail -20 "$WORK/server.log"; }
  [[ $rc != 0 && -f "$WORK/ops.log" ]] && { echo "--- last client log lines"; tail -30 "$WORK/ops.log"; }
  rm -rf "$WORK" "$SHM"
  echo "$RESULT"
  exit $rc
}
trap cleanup EXIT
say() { printf '%s  %s\n' "$(date +%T)" "$*"; }

# What the clients need.
VENV=${S3_VENV:-/tmp/spindle-check-s3-venv}
[[ -x "$VENV/bin/aws" && -x "$VENV/bin/python" ]] || {
  say "installing awscli and boto3 into $VENV"
  python3 -m venv "$VENV" && "$VENV/bin/pip" install -q awscli "boto3[crt]" >"$WORK/pip.log" 2>&1 ||
    { tail -5 "$WORK/pip.log"; RESULT="s3-acceptance: could not install awscli and boto3"; exit 1; }; }
if [[ ! -x /usr/bin/aws ]] || ! command -v rclone >/dev/null; then
  say "installing Debian's awscli and rclone"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq awscli rclone; } >"$WORK/apt.log" 2>&1 ||
    { tail -5 "$WORK/apt.log"; RESULT="s3-acceptance: could not install awscli (Debian) and rclone"; exit 1; }
fi

go build -o "$WORK/spindle" ./cmd/spindle
read -r META_PORT S3_PORT <<<"$(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]; print(*[x.getsockname()[1] for x in s])')"
export SPINDLE_S3_ACCESS_KEY=AKIAACCEPTANCE000001 SPINDLE_S3_SECRET_KEY=acceptance-secret-key-0123456789abcdef
# --insecure: plain http, as the clients here are configured; this checks S3 compatibility, not TLS
setsid "$WORK/spindle" server --insecure --datanodes 4 --dir "$SHM/srv" --meta-listen "127.0.0.1:$META_PORT" \
  --s3-listen "127.0.0.1:$S3_PORT" >"$WORK/server.log" 2>&1 &
SRV=$!
EP="http://127.0.0.1:$S3_PORT"
export AWS_ACCESS_KEY_ID=$SPINDLE_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$SPINDLE_S3_SECRET_KEY AWS_DEFAULT_REGION=us-east-1 \
  AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_EC2_METADATA_DISABLED=true AWS_MAX_ATTEMPTS=10
export RCLONE_CONFIG=/dev/null RCLONE_CONFIG_SPN_TYPE=s3 RCLONE_CONFIG_SPN_PROVIDER=Other RCLONE_CONFIG_SPN_ENDPOINT=$EP \
  RCLONE_CONFIG_SPN_ACCESS_KEY_ID=$SPINDLE_S3_ACCESS_KEY RCLONE_CONFIG_SPN_SECRET_ACCESS_KEY=$SPINDLE_S3_SECRET_KEY \
  RCLONE_CONFIG_SPN_REGION=us-east-1
for _ in $(seq 120); do
  AWS_MAX_ATTEMPTS=1 timeout 10 "$VENV/bin/aws" --endpoint-url "$EP" s3 ls >/dev/null 2>&1 && break
  kill -0 "$SRV" 2>/dev/null || break
  sleep 1
done
AWS_MAX_ATTEMPTS=1 timeout 10 "$VENV/bin/aws" --endpoint-url "$EP" s3 ls >/dev/null 2>&1 ||
  { RESULT="s3-acceptance: the server's S3 endpoint did not answer at $EP"; exit 1; }
say "spindle server (4 datanodes, data on $SHM) answers S3 at $EP"

ok=0; n=0; fails=()
check() {
  local what=$1; shift; n=$((n+1))
  local t0=$SECONDS
  if "$@" >>"$WORK/ops.log" 2>&1; then ok=$((ok+1)); say "ok    $what ($((SECONDS-t0)) s)"
  else fails+=("$what"); say "FAIL  $what ($((SECONDS-t0)) s)"; fi
}
D="$WORK/files"; mkdir -p "$D/up" "$D/down" "$D/tree"
SIZES="0 1 1024 8388608 104857600 1073741824"
say "making the test files (0 B to 1 GiB, and a tree of 1,000)"
for s in $SIZES; do head -c "$s" /dev/urandom >"$D/up/f$s"; done
for i in $(seq 1000); do head -c $((RANDOM % 20000)) /dev/urandom >"$D/tree/t$i"; done
same() { cmp "$1" "$2" && rm -f "$2"; }
# range_of FILE OFFSET LENGTH: those bytes of FILE.
range_of() { tail -c +$(($2 + 1)) "$1" | head -c "$3"; }
big=$D/up/f1073741824
R0=536870000; RL=2000000   # a range across part boundaries of the 1 GiB object

# --- aws-cli, PyPI (v1) and Debian (v2): the high-level commands and s3api.
awscli() { # awscli NAME BINARY
  local name=$1 bin=$2 B=acc-$1
  a() { timeout 600 "$bin" --endpoint-url "$EP" "$@"; }
  check "$name mb" a s3 mb "s3://$B"
  for s in $SIZES; do
    check "$name put $s" a s3 cp --only-show-errors "$D/up/f$s" "s3://$B/f$s"
    check "$name get $s" eval 'a s3 cp --only-show-errors "s3://$B/f$s" "$D/down/f$s" && same "$D/up/f$s" "$D/down/f$s"'
  done
  check "$name ranged get" eval 'a s3api get-object --bucket "$B" --key f1073741824 --range "bytes=$R0-$((R0+RL-1))" "$D/down/r" >/dev/null &&
    cmp <(range_of "$big" $R0 $RL) "$D/down/r"'
  check "$name copy" eval 'a s3api copy-object --bucket "$B" --key copy --copy-source "$B/f8388608" >/dev/null &&
    a s3 cp --only-show-errors "s3://$B/copy" "$D/down/copy" && same "$D/up/f8388608" "$D/down/copy"'
  check "$name presigned get (curl)" eval 'curl -fsS -o "$D/down/pre" "$(a s3 presign "s3://$B/f1024" --expires-in 300)" && same "$D/up/f1024" "$D/down/pre"'
  check "$name list 10,000" eval '[[ $(a s3 ls --recursive "s3://acc-many/many/" | wc -l) == 10000 ]]'
  check "$name list delimiter" eval '[[ $(a s3 ls "s3://acc-many/many/" | grep -c " PRE ") == 100 ]] &&
    [[ $(a s3api list-objects-v2 --bucket acc-many --prefix many/d4 --delimiter / --query "length(CommonPrefixes)") == 10 ]]'
  check "$name delete" eval 'a s3 rm --only-show-errors --recursive "s3://$B" && a s3 rb "s3://$B" && ! a s3api head-bucket --bucket "$B" 2>/dev/null'
}

# --- boto3: 10,000 keys (made here, listed by every client), presigned PUT.
py() { timeout 900 "$VENV/bin/python" - "$EP" "$D" "$@"; }
check "boto3 put 10,000 keys" py <<'PY'
import sys, boto3, botocore, concurrent.futures as cf
ep, d = sys.argv[1:3]
s3 = boto3.client("s3", endpoint_url=ep, config=botocore.config.Config(max_pool_connections=32, retries={"max_attempts": 10}))
s3.create_bucket(Bucket="acc-many")
keys = [f"many/d{i // 100:02d}/k{i % 100:02d}" for i in range(10000)]
with cf.ThreadPoolExecutor(32) as ex:
    list(ex.map(lambda k: s3.put_object(Bucket="acc-many", Key=k, Body=k.encode()), keys))
PY
awscli awscli-pypi "$VENV/bin/aws"
awscli awscli-debian /usr/bin/aws

check "boto3 sizes, ranges, copy, listings, presigned, delete" py "$SIZES" $R0 $RL <<'PY'
import os, sys, urllib.request, boto3, botocore
from boto3.s3.transfer import TransferConfig
ep, d, sizes, r0, rl = sys.argv[1], sys.argv[2], sys.argv[3].split(), int(sys.argv[4]), int(sys.argv[5])
s3 = boto3.client("s3", endpoint_url=ep, config=botocore.config.Config(max_pool_connections=16, retries={"max_attempts": 10}))
b = "acc-boto3"; s3.create_bucket(Bucket=b)
cfg = TransferConfig(multipart_threshold=8 << 20, multipart_chunksize=16 << 20, max_concurrency=8)
def same(a, c):
    with open(a, "rb") as x, open(c, "rb") as y:
        while True:
            p, q = x.read(1 << 20), y.read(1 << 20)
            assert p == q, f"{a} and {c} differ"
            if not p: return
for s in sizes:
    up, down = f"{d}/up/f{s}", f"{d}/down/b{s}"
    s3.upload_file(up, b, f"f{s}", Config=cfg)
    s3.download_file(b, f"f{s}", down, Config=cfg)
    same(up, down); os.remove(down)
    assert s3.head_object(Bucket=b, Key=f"f{s}")["ContentLength"] == int(s)
r = s3.get_object(Bucket=b, Key="f1073741824", Range=f"bytes={r0}-{r0 + rl - 1}")["Body"].read()
with open(f"{d}/up/f1073741824", "rb") as f:
    f.seek(r0); assert r == f.read(rl), "ranged get differs"
s3.copy_object(Bucket=b, Key="copy", CopySource={"Bucket": b, "Key": "f104857600"})
s3.download_file(b, "copy", f"{d}/down/bcopy"); same(f"{d}/up/f104857600", f"{d}/down/bcopy"); os.remove(f"{d}/down/bcopy")
n, tok = 0, None
while True:
    kw = dict(Bucket="acc-many", Prefix="many/")
    if tok: kw["ContinuationToken"] = tok
    r = s3.list_objects_v2(**kw); n += r["KeyCount"]
    if not r["IsTruncated"]: break
    tok = r["NextContinuationToken"]
assert n == 10000, f"listed {n} of 10,000"
r = s3.list_objects_v2(Bucket="acc-many", Prefix="many/d4", Delimiter="/")
assert [p["Prefix"] for p in r["CommonPrefixes"]] == [f"many/d4{i}/" for i in range(10)], r["CommonPrefixes"]
r = s3.list_objects(Bucket="acc-many", Prefix="many/d42/", MaxKeys=30)
assert len(r["Contents"]) == 30 and r["IsTruncated"], "ListObjects v1 paging"
v4 = boto3.client("s3", endpoint_url=ep, config=botocore.config.Config(signature_version="s3v4"))
for signer in (s3, v4):  # boto3's default presigner here is Signature V2; then V4
    ct = "application/x-acceptance"
    put = signer.generate_presigned_url("put_object", Params={"Bucket": b, "Key": "presigned", "ContentType": ct}, ExpiresIn=300)
    body = os.urandom(100_000)
    urllib.request.urlopen(urllib.request.Request(put, data=body, method="PUT", headers={"Content-Type": ct})).read()
    get = signer.generate_presigned_url("get_object", Params={"Bucket": b, "Key": "presigned"}, ExpiresIn=300)
    assert urllib.request.urlopen(get).read() == body, "presigned PUT then GET differs"
keys = [o["Key"] for o in s3.list_objects_v2(Bucket=b)["Contents"]]
assert not s3.delete_objects(Bucket=b, Delete={"Objects": [{"Key": k} for k in keys]}).get("Errors")
s3.delete_bucket(Bucket=b)
PY
check "curl presigned PUT (boto3's URL)" eval 'u=$(py <<<"import sys, boto3; print(boto3.client(\"s3\", endpoint_url=sys.argv[1]).generate_presigned_url(\"put_object\", Params={\"Bucket\": \"acc-many\", \"Key\": \"curl-put\"}, ExpiresIn=300))") &&
  curl -fsS -T "$D/up/f8388608" "$u" && "$VENV/bin/aws" --endpoint-url "$EP" s3 cp --only-show-errors s3://acc-many/curl-put "$D/down/curl" && same "$D/up/f8388608" "$D/down/curl"'

# --- rclone: sizes, a range, server-side copy, listings, sync and check.
rc() { timeout 900 env -u AWS_CA_BUNDLE rclone --s3-upload-concurrency 8 --s3-chunk-size 16M "$@"; }
check "rclone mkdir" rc mkdir spn:acc-rclone
for s in $SIZES; do
  check "rclone put $s" rc copyto "$D/up/f$s" "spn:acc-rclone/f$s"
  check "rclone get $s" eval 'rc copyto "spn:acc-rclone/f$s" "$D/down/r$s" && same "$D/up/f$s" "$D/down/r$s"'
done
check "rclone ranged cat" eval 'cmp <(rc cat --offset $R0 --count $RL spn:acc-rclone/f1073741824) <(range_of "$big" $R0 $RL)'
check "rclone server-side copy" eval 'rc copyto spn:acc-rclone/f8388608 spn:acc-rclone/copy && rc copyto spn:acc-rclone/copy "$D/down/rcopy" && same "$D/up/f8388608" "$D/down/rcopy"'
check "rclone list 10,000" eval '[[ $(rc lsf -R --files-only spn:acc-many/many/ | wc -l) == 10000 && $(rc lsf --dirs-only spn:acc-many/many/ | wc -l) == 100 ]]'
check "rclone sync 1,000 files" rc sync "$D/tree" spn:acc-rclone/tree
check "rclone check 1,000 files" rc check --download "$D/tree" spn:acc-rclone/tree
check "rclone delete" eval 'rc purge spn:acc-rclone && ! rc lsf spn:acc-rclone 2>/dev/null | grep -q .'

# --- minio-go (its Go test, on a cluster of its own, at full size).
check "minio-go (go test, 1 GiB and 10,000 keys)" env SPINDLE_S3_FULL=1 TMPDIR="$SHM" timeout 1200 \
  go test -count=1 -run 'TestMinio' ./internal/s3gw/

# --- kill -9 of a datanode during a 1 GiB multipart upload.
dn=$(pgrep -P "$SRV" -f ' datanode ' | head -1 || true)
if [[ -z "$dn" ]]; then
  n=$((n+1)); fails+=("kill -9 during multipart: no datanode process found under the server ($SRV)")
else
  check "boto3 1 GiB multipart with datanode $dn killed (-9) at 256 MiB" py "$dn" <<'PY'
import os, signal, sys, threading, boto3, botocore
from boto3.s3.transfer import TransferConfig
ep, d, pid = sys.argv[1], sys.argv[2], int(sys.argv[3])
s3 = boto3.client("s3", endpoint_url=ep, config=botocore.config.Config(max_pool_connections=16, retries={"max_attempts": 10, "mode": "standard"}))
s3.create_bucket(Bucket="acc-kill")
sent, killed, lock = [0], [False], threading.Lock()
def progress(n):
    with lock:
        sent[0] += n
        if not killed[0] and sent[0] >= 256 << 20:
            os.kill(pid, signal.SIGKILL); killed[0] = True
            print(f"killed datanode {pid} with {sent[0] >> 20} MiB sent", flush=True)
cfg = TransferConfig(multipart_threshold=8 << 20, multipart_chunksize=16 << 20, max_concurrency=8)
src = f"{d}/up/f1073741824"
s3.upload_file(src, "acc-kill", "big", Config=cfg, Callback=progress)
assert killed[0], "the upload ended before the kill"
s3.download_file("acc-kill", "big", f"{d}/down/kill", Config=cfg)
with open(src, "rb") as x, open(f"{d}/down/kill", "rb") as y:
    while True:
        p, q = x.read(1 << 20), y.read(1 << 20)
        assert p == q, "the object read back differs"
        if not p: break
os.remove(f"{d}/down/kill")
print("read back byte-for-byte with one datanode dead")
PY
fi

RESULT="s3-acceptance: $ok/$n checks passed${fails:+; failed: ${fails[*]}}"
[[ $ok == "$n" ]]
