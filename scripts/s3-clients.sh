#!/usr/bin/env bash
# S3 gateway: real clients, unchanged (aws-cli from PyPI, boto3, rclone, curl on
# presigned URLs) against `spindle server`'s S3 endpoint; every byte compared.
# Installs what it needs (a Python venv in $S3_VENV, rclone through apt-get).
# S3_ENDPOINT=http://HOST:PORT (with S3_ACCESS_KEY, S3_SECRET_KEY) points it at
# an S3 server that is already running instead of starting Spindle.
# (the acceptance check ../shared/checks/s3-clients.sh, with its lib.sh inlined;
# run from the checkout: make test-s3)
# Sourced by the checks: build spindle from the project checkout (the current
# directory) into a temporary directory, and small helpers to read JSON.
set -euo pipefail
CHECK_TMP=$(mktemp -d /tmp/spindle-check.XXXXXX)
trap 'rm -rf "$CHECK_TMP"' EXIT

build_spindle() {
  if [[ ! -d cmd/spindle ]]; then
    echo "no cmd/spindle in $(pwd)"; exit 1
  fi
  go build -o "$CHECK_TMP/spindle" ./cmd/spindle >"$CHECK_TMP/build.log" 2>&1 || {
    tail -20 "$CHECK_TMP/build.log"; echo "build failed"; exit 1; }
  SPINDLE="$CHECK_TMP/spindle"
}

# insecure SUBCOMMAND...: prints --insecure when that spindle subcommand has the
# flag (plaintext), so that the compatibility checks keep working once TLS is
# the default; they test compatibility, not security.
insecure() { "$SPINDLE" "$@" --help 2>/dev/null | grep -q -- '--insecure' && echo --insecure || true; }
# lifecycle_flags: a short S3 lifecycle day (2 s, runs every second) for the
# lifecycle checks, when spindle server has the flags (LIFECYCLE_DAY: its
# seconds, for s3_lifecycle.py; unset against another endpoint).
lifecycle_flags() { "$SPINDLE" server --help 2>/dev/null | grep -q -- '--lifecycle-day' && echo --lifecycle-day 2s --lifecycle-interval 1s || true; }
S3_VENV=${S3_VENV:-/tmp/spindle-check-s3-venv}
[[ -x "$S3_VENV/bin/aws" && -x "$S3_VENV/bin/python" ]] && "$S3_VENV/bin/python" -c 'import pytest' 2>/dev/null || {
  { [[ -x "$S3_VENV/bin/python" ]] || python3 -m venv "$S3_VENV"; } && "$S3_VENV/bin/pip" install -q awscli "boto3[crt]" pytest >"$CHECK_TMP/pip.log" 2>&1 ||
    { tail -5 "$CHECK_TMP/pip.log"; echo "s3-clients: could not install awscli, boto3 and pytest"; exit 1; }; }
command -v rclone >/dev/null || { apt-get update -qq >/dev/null 2>&1; apt-get install -y -qq rclone >/dev/null 2>&1; } ||
  { echo "s3-clients: could not install rclone"; exit 1; }

if [[ -z "${S3_ENDPOINT:-}" ]]; then
  build_spindle
  ports=$(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]; print(*[x.getsockname()[1] for x in s])')
  read -r META_PORT S3_PORT <<<"$ports"
  export SPINDLE_S3_ACCESS_KEY=AKIACHECKCLIENTS0001 SPINDLE_S3_SECRET_KEY=check-clients-secret-key-0123456789abcdef
  setsid "$SPINDLE" server $(insecure server) --dir "$CHECK_TMP/srv" --meta-listen "127.0.0.1:$META_PORT" \
    --s3-listen "127.0.0.1:$S3_PORT" $(lifecycle_flags) >"$CHECK_TMP/server.log" 2>&1 &
  SRV=$!
  [[ -n "$(lifecycle_flags)" ]] && LIFECYCLE_DAY=2
  S3_ENDPOINT="http://127.0.0.1:$S3_PORT"; S3_ACCESS_KEY=$SPINDLE_S3_ACCESS_KEY; S3_SECRET_KEY=$SPINDLE_S3_SECRET_KEY
fi
RESULT=""
trap 'rc=$?; if [[ -n "${SRV:-}" ]]; then kill -TERM -- -"$SRV" 2>/dev/null || true; sleep 1; kill -9 -- -"$SRV" 2>/dev/null || true; wait "$SRV" 2>/dev/null || true; fi; if [[ -n "${KEEP_LOG:-}" ]]; then cp "$CHECK_TMP/ops.log" "$KEEP_LOG" || true; fi; rm -rf "$CHECK_TMP"; echo "$RESULT"; exit $rc' EXIT

export AWS_ACCESS_KEY_ID=$S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$S3_SECRET_KEY AWS_DEFAULT_REGION=us-east-1 \
  AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_EC2_METADATA_DISABLED=true
aws() { timeout 300 "$S3_VENV/bin/aws" --endpoint-url "$S3_ENDPOINT" "$@"; }
probe() { AWS_MAX_ATTEMPTS=1 timeout 10 "$S3_VENV/bin/aws" --endpoint-url "$S3_ENDPOINT" --cli-connect-timeout 2 s3 ls >/dev/null 2>&1; }
for _ in $(seq 90); do
  probe && break
  [[ -n "${SRV:-}" ]] && ! kill -0 "$SRV" 2>/dev/null && break
  sleep 1
done
probe || { [[ -n "${SRV:-}" ]] && tail -5 "$CHECK_TMP/server.log"; RESULT="s3-clients: no S3 endpoint answering at $S3_ENDPOINT"; exit 1; }

ok=0; n=0; fails=()
check() { local what=$1; shift; n=$((n+1)); if "$@" >>"$CHECK_TMP/ops.log" 2>&1; then ok=$((ok+1)); else fails+=("$what"); fi; }
B=check-clients-$RANDOM; D="$CHECK_TMP/files"; mkdir -p "$D/up" "$D/down" "$D/tree"
for s in 0 1 1024 8388608 104857600; do head -c "$s" /dev/urandom >"$D/up/f$s"; done

# aws-cli (PyPI): high-level and s3api
cp_down() { aws s3 cp "s3://$B/dir/f$1" "$D/down/f$1" && cmp "$D/up/f$1" "$D/down/f$1"; }
ls_prefix() { [[ $(aws s3 ls "s3://$B/dir/" | wc -l) == 5 ]]; }
range_get() { aws s3api get-object --bucket "$B" --key dir/f8388608 --range bytes=1000-4999999 "$D/down/range" >/dev/null &&
  cmp <(tail -c +1001 "$D/up/f8388608" | head -c 4999000) "$D/down/range"; }
copy_object() { aws s3api copy-object --bucket "$B" --key copy/f1024 --copy-source "$B/dir/f1024" >/dev/null &&
  aws s3 cp "s3://$B/copy/f1024" "$D/down/copy" && cmp "$D/up/f1024" "$D/down/copy"; }
presigned_get() { curl -fsS -o "$D/down/pre" "$(aws s3 presign "s3://$B/dir/f1024" --expires-in 300)" && cmp "$D/up/f1024" "$D/down/pre"; }
rm_then_404() { aws s3 rm "s3://$B/copy/f1024" && ! aws s3api head-object --bucket "$B" --key copy/f1024; }
check "aws mb" aws s3 mb "s3://$B"
for s in 0 1 1024 8388608 104857600; do
  check "aws cp up $s" aws s3 cp "$D/up/f$s" "s3://$B/dir/f$s"
  check "aws cp down $s" cp_down "$s"
done
check "aws ls prefix" ls_prefix
check "aws range get" range_get
check "aws copy-object" copy_object
check "aws presigned get" presigned_get
check "aws rm + head 404" rm_then_404

# boto3: checksums, paging, batch delete, multipart with parallel parts, bad signature
check "boto3" "$S3_VENV/bin/python" - "$S3_ENDPOINT" "$B" "$D" <<'PY'
import hashlib, os, sys, boto3, botocore
from boto3.s3.transfer import TransferConfig
ep, b, d = sys.argv[1:]
s3 = boto3.client("s3", endpoint_url=ep, config=botocore.config.Config(retries={"max_attempts": 3}))
body = os.urandom(300_000)
s3.put_object(Bucket=b, Key="b3/crc", Body=body, ChecksumAlgorithm="CRC32C", Metadata={"color": "blue"})
r = s3.get_object(Bucket=b, Key="b3/crc", ChecksumMode="ENABLED")
assert r["Body"].read() == body and r["Metadata"].get("color") == "blue"
assert r.get("ChecksumCRC32C"), "no CRC32C checksum returned with ChecksumMode=ENABLED"
keys = [f"b3/many/{i:05d}" for i in range(1500)]
for k in keys: s3.put_object(Bucket=b, Key=k, Body=k.encode())
seen, tok = [], None
while True:
    kw = dict(Bucket=b, Prefix="b3/many/", MaxKeys=1000)
    if tok: kw["ContinuationToken"] = tok
    r = s3.list_objects_v2(**kw); seen += [o["Key"] for o in r.get("Contents", [])]
    if not r.get("IsTruncated"): break
    tok = r["NextContinuationToken"]
assert seen == keys, f"listing: {len(seen)} keys, wanted {len(keys)} in order"
r = s3.list_objects_v2(Bucket=b, Prefix="b3/", Delimiter="/")
assert [p["Prefix"] for p in r.get("CommonPrefixes", [])] == ["b3/many/"], r.get("CommonPrefixes")
for i in range(0, 1500, 1000):
    r = s3.delete_objects(Bucket=b, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]]})
    assert not r.get("Errors"), r.get("Errors")
assert s3.list_objects_v2(Bucket=b, Prefix="b3/many/").get("KeyCount") == 0
big = os.path.join(d, "up", "mp"); open(big, "wb").write(os.urandom(64 << 20))
s3.upload_file(big, b, "b3/mp", Config=TransferConfig(multipart_threshold=5 << 20, multipart_chunksize=8 << 20, max_concurrency=8))
s3.download_file(b, "b3/mp", big + ".down")
assert open(big, "rb").read() == open(big + ".down", "rb").read()
etag = s3.head_object(Bucket=b, Key="b3/mp")["ETag"].strip('"')
assert etag.endswith("-8"), f"multipart ETag {etag}"
bad = boto3.client("s3", endpoint_url=ep, aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"], aws_secret_access_key="wrong")
try:
    bad.put_object(Bucket=b, Key="b3/bad", Body=b"x"); raise SystemExit("a wrong secret was accepted")
except botocore.exceptions.ClientError as e:
    assert e.response["Error"]["Code"] in ("SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied"), e.response["Error"]
PY

# Credentials as MinIO has them (issue 33 item 5): a user whose access key is
# minioadmin (lower case) works with aws-cli and boto3, in a bucket it creates.
if [[ -n "${SRV:-}" ]]; then
  mc_user() { "$SPINDLE" admin user create minio-user --access-key minioadmin --secret-key minioadmin \
    --meta "127.0.0.1:$META_PORT" $(insecure admin user create) >/dev/null; }
  mc_aws() { AWS_ACCESS_KEY_ID=minioadmin AWS_SECRET_ACCESS_KEY=minioadmin aws s3 mb "s3://mn-$B" &&
    AWS_ACCESS_KEY_ID=minioadmin AWS_SECRET_ACCESS_KEY=minioadmin aws s3 cp "$D/up/f1024" "s3://mn-$B/f" &&
    AWS_ACCESS_KEY_ID=minioadmin AWS_SECRET_ACCESS_KEY=minioadmin aws s3 cp "s3://mn-$B/f" "$D/down/mn" && cmp "$D/up/f1024" "$D/down/mn"; }
  check "admin user create minioadmin" mc_user
  check "aws-cli as minioadmin" mc_aws
  check "boto3 as minioadmin" "$S3_VENV/bin/python" - "$S3_ENDPOINT" "mn-$B" <<'PY'
import os, sys, boto3
ep, b = sys.argv[1:]
s3 = boto3.client("s3", endpoint_url=ep, aws_access_key_id="minioadmin", aws_secret_access_key="minioadmin", region_name="us-east-1")
body = os.urandom(100_000)
s3.put_object(Bucket=b, Key="boto3", Body=body)
assert s3.get_object(Bucket=b, Key="boto3")["Body"].read() == body
assert "boto3" in [o["Key"] for o in s3.list_objects_v2(Bucket=b).get("Contents", [])]
PY
fi

# issue 34: tagging, CORS, conditional writes, presigned POST, metadata across copies
check "boto3 features (s3_features.py)" "$S3_VENV/bin/python" scripts/s3_features.py "$S3_ENDPOINT" "$B-f"
tag_cli() { aws s3api put-object --bucket "$B" --key tagged --body "$D/up/f1024" --tagging 'team=storage&tier=hot' >/dev/null &&
  [[ $(aws s3api get-object-tagging --bucket "$B" --key tagged --query 'length(TagSet)') == 2 ]] &&
  aws s3api put-bucket-tagging --bucket "$B" --tagging 'TagSet=[{Key=owner,Value=ops}]' &&
  [[ $(aws s3api get-bucket-tagging --bucket "$B" --query 'TagSet[0].Value' --output text) == ops ]]; }
cors_cli() { aws s3api put-bucket-cors --bucket "$B" --cors-configuration \
  '{"CORSRules":[{"AllowedOrigins":["http://*.example.org"],"AllowedMethods":["GET","PUT"],"AllowedHeaders":["content-type"],"ExposeHeaders":["ETag"],"MaxAgeSeconds":120}]}' &&
  [[ $(aws s3api get-bucket-cors --bucket "$B" --query 'CORSRules[0].MaxAgeSeconds') == 120 ]]; }
# a real preflight: allowed (200 and the CORS headers), then an origin no rule allows (403, none)
preflight_curl() { local h; h=$(curl -sS -o /dev/null -D - -X OPTIONS "$S3_ENDPOINT/$B/tagged" -H 'Origin: http://app.example.org' \
    -H 'Access-Control-Request-Method: PUT' -H 'Access-Control-Request-Headers: content-type') &&
  grep -qi '^HTTP/1.1 200' <<<"$h" && grep -qi '^access-control-allow-origin: http://app.example.org' <<<"$h" &&
  grep -qi '^access-control-max-age: 120' <<<"$h" &&
  [[ $(curl -sS -o /dev/null -w '%{http_code}' -X OPTIONS "$S3_ENDPOINT/$B/tagged" -H 'Origin: http://evil.test' \
    -H 'Access-Control-Request-Method: GET') == 403 ]]; }
# a browser form upload sent by curl -F: boto3 signs the policy, curl posts the form
post_curl() { local f="$CHECK_TMP/post.json" args=() k
  "$S3_VENV/bin/python" - "$S3_ENDPOINT" "$B" >"$f" <<'PY' || return 1
import json, sys, boto3
from botocore.config import Config
s3 = boto3.client("s3", endpoint_url=sys.argv[1], config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))
print(json.dumps(s3.generate_presigned_post(Bucket=sys.argv[2], Key="form/${filename}", Fields={"x-amz-meta-from": "curl"},
      Conditions=[["starts-with", "$key", "form/"], {"x-amz-meta-from": "curl"}, ["content-length-range", 1, 1 << 20]], ExpiresIn=600)))
PY
  while IFS= read -r k; do args+=(-F "$k=$("$S3_VENV/bin/python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["fields"][sys.argv[2]])' "$f" "$k")"); done \
    < <("$S3_VENV/bin/python" -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1]))["fields"]))' "$f")
  [[ $(curl -sS -o /dev/null -w '%{http_code}' "${args[@]}" -F "file=@$D/up/f1024;filename=f1024.bin" "$S3_ENDPOINT/$B") == 204 ]] &&
    aws s3 cp "s3://$B/form/f1024.bin" "$D/down/form" >/dev/null && cmp "$D/up/f1024" "$D/down/form" &&
    [[ $(aws s3api head-object --bucket "$B" --key form/f1024.bin --query Metadata.from --output text) == curl ]]; }
check "aws-cli tagging" tag_cli
# issue 35: versioning with boto3 (s3_versions.py) and aws-cli
check "boto3 versioning (s3_versions.py)" "$S3_VENV/bin/python" scripts/s3_versions.py "$S3_ENDPOINT" "$B-v"
versions_cli() { local vb="$B-vcli" v1 v2 m
  aws s3api create-bucket --bucket "$vb" >/dev/null &&
  aws s3api put-bucket-versioning --bucket "$vb" --versioning-configuration Status=Enabled &&
  [[ $(aws s3api get-bucket-versioning --bucket "$vb" --query Status --output text) == Enabled ]] &&
  v1=$(aws s3api put-object --bucket "$vb" --key k --body "$D/up/f1024" --query VersionId --output text) &&
  v2=$(aws s3api put-object --bucket "$vb" --key k --body "$D/up/f8388608" --query VersionId --output text) &&
  [[ -n $v1 && $v1 != "$v2" ]] &&
  aws s3api get-object --bucket "$vb" --key k --version-id "$v1" "$D/down/v1" >/dev/null && cmp "$D/up/f1024" "$D/down/v1" &&
  m=$(aws s3api delete-object --bucket "$vb" --key k --query VersionId --output text) &&
  [[ $(aws s3api list-object-versions --bucket "$vb" --query 'length(Versions)') == 2 ]] &&
  [[ $(aws s3api list-object-versions --bucket "$vb" --query 'DeleteMarkers[0].IsLatest') == true ]] &&
  ! aws s3api head-object --bucket "$vb" --key k 2>/dev/null &&
  aws s3api delete-object --bucket "$vb" --key k --version-id "$m" >/dev/null &&
  aws s3api get-object --bucket "$vb" --key k "$D/down/v2" >/dev/null && cmp "$D/up/f8388608" "$D/down/v2" &&
  for v in "$v1" "$v2"; do aws s3api delete-object --bucket "$vb" --key k --version-id "$v" >/dev/null || return 1; done &&
  aws s3api delete-bucket --bucket "$vb"; }
check "aws-cli versioning" versions_cli
# issue 35 item 2: object lock with boto3 (s3_objlock.py) and aws-cli; a locked
# version's delete is refused with AccessDenied (a COMPLIANCE bucket stays)
check "boto3 object lock (s3_objlock.py)" "$S3_VENV/bin/python" scripts/s3_objlock.py "$S3_ENDPOINT" "$B-l"
objlock_cli() { local lb="$B-lcli" v until err
  until=$(date -u -d '+1 day' +%Y-%m-%dT%H:%M:%SZ) &&
  aws s3api create-bucket --bucket "$lb" --object-lock-enabled-for-bucket >/dev/null &&
  aws s3api put-object-lock-configuration --bucket "$lb" \
    --object-lock-configuration 'ObjectLockEnabled=Enabled,Rule={DefaultRetention={Mode=GOVERNANCE,Days=1}}' &&
  [[ $(aws s3api get-object-lock-configuration --bucket "$lb" --query ObjectLockConfiguration.Rule.DefaultRetention.Mode --output text) == GOVERNANCE ]] &&
  v=$(aws s3api put-object --bucket "$lb" --key k --body "$D/up/f1024" --query VersionId --output text) &&
  [[ $(aws s3api head-object --bucket "$lb" --key k --query ObjectLockMode --output text) == GOVERNANCE ]] &&
  aws s3api put-object-retention --bucket "$lb" --key k --version-id "$v" --retention "Mode=COMPLIANCE,RetainUntilDate=$until" --bypass-governance-retention &&
  [[ $(aws s3api get-object-retention --bucket "$lb" --key k --version-id "$v" --query Retention.Mode --output text) == COMPLIANCE ]] &&
  aws s3api put-object-legal-hold --bucket "$lb" --key k --version-id "$v" --legal-hold Status=ON &&
  [[ $(aws s3api get-object-legal-hold --bucket "$lb" --key k --version-id "$v" --query LegalHold.Status --output text) == ON ]] &&
  err=$(aws s3api delete-object --bucket "$lb" --key k --version-id "$v" --bypass-governance-retention 2>&1 >/dev/null; true) &&
  [[ $err == *AccessDenied* ]] &&
  aws s3api get-object --bucket "$lb" --key k --version-id "$v" "$D/down/locked" >/dev/null && cmp "$D/up/f1024" "$D/down/locked"; }
check "aws-cli object lock" objlock_cli
# issue 35 item 3: lifecycle with boto3 (s3_lifecycle.py: the rules at work with the short day) and aws-cli
check "boto3 lifecycle (s3_lifecycle.py)" env LIFECYCLE_DAY="${LIFECYCLE_DAY:-}" "$S3_VENV/bin/python" scripts/s3_lifecycle.py "$S3_ENDPOINT" "$B-lc"
lifecycle_cli() { local lb="$B-lccli"
  aws s3api create-bucket --bucket "$lb" >/dev/null &&
  aws s3api put-bucket-lifecycle-configuration --bucket "$lb" --lifecycle-configuration \
    '{"Rules":[{"ID":"tmp","Filter":{"Prefix":"tmp/"},"Status":"Enabled","Expiration":{"Days":7}},{"ID":"mpu","Filter":{},"Status":"Enabled","AbortIncompleteMultipartUpload":{"DaysAfterInitiation":1}}]}' &&
  [[ $(aws s3api get-bucket-lifecycle-configuration --bucket "$lb" --query 'Rules[0].Expiration.Days') == 7 ]] &&
  [[ $(aws s3api get-bucket-lifecycle-configuration --bucket "$lb" --query 'length(Rules)') == 2 ]] &&
  ! aws s3api put-bucket-lifecycle-configuration --bucket "$lb" --lifecycle-configuration \
    '{"Rules":[{"ID":"x","Filter":{},"Status":"Enabled","Expiration":{"Days":0}}]}' 2>"$CHECK_TMP/lc.err" && grep -q InvalidArgument "$CHECK_TMP/lc.err" &&
  aws s3api delete-bucket-lifecycle --bucket "$lb" &&
  ! aws s3api get-bucket-lifecycle-configuration --bucket "$lb" 2>"$CHECK_TMP/lc.err" && grep -q NoSuchLifecycleConfiguration "$CHECK_TMP/lc.err" &&
  aws s3api delete-bucket --bucket "$lb"; }
check "aws-cli lifecycle" lifecycle_cli
check "aws-cli cors" cors_cli
check "curl CORS preflight" preflight_curl
check "curl -F presigned POST" post_curl
if command -v chromium >/dev/null; then
  check "chromium CORS, fetch and HTML form POST (s3_browser.py)" "$S3_VENV/bin/python" scripts/s3_browser.py "$S3_ENDPOINT" "$B-web"
else
  echo "s3-clients: no chromium (apt-get install chromium): the browser checks are curl's only"
fi
# boto3: the object API as S3 answers it, a test per behaviour (scripts/s3tests)
S3TESTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/s3tests
check "boto3 object API (s3tests)" env S3_ENDPOINT="$S3_ENDPOINT" S3_ACCESS_KEY="$S3_ACCESS_KEY" S3_SECRET_KEY="$S3_SECRET_KEY" \
  timeout 600 "$S3_VENV/bin/python" -m pytest -q -p no:cacheprovider "$S3TESTS"

# boto3: S3 permissions (issue 32): a bucket policy that denies PutObject to one
# user and allows GetObject to every other, a public-read object read by curl
# without credentials and a private one refused, the policy's removal restoring
# the grants before it, anonymous requests refused by default. Needs two users:
# only against the server started here.
if [[ -n "${SRV:-}" ]]; then
  for u in ALICE BOB; do
    check "admin user create $u" "$SPINDLE" admin user create "check$u" $(insecure admin user create) --meta "127.0.0.1:$META_PORT" \
      --access-key "AKIACHECK${u}00000" --secret-key "check-$u-secret-0123456789abcdef"
  done
  check "boto3 permissions" "$S3_VENV/bin/python" - "$S3_ENDPOINT" "$B-perm" <<'PY'
import json, subprocess, sys, boto3, botocore
ep, b = sys.argv[1], sys.argv[2]
cfg = botocore.config.Config(retries={"max_attempts": 1})
owner = boto3.client("s3", endpoint_url=ep, config=cfg)
user = lambda u: boto3.client("s3", endpoint_url=ep, config=cfg, aws_access_key_id=f"AKIACHECK{u}00000",
                              aws_secret_access_key=f"check-{u}-secret-0123456789abcdef")
alice, bob = user("ALICE"), user("BOB")
def code(f, *a, **k):
    try:
        f(*a, **k); return "OK"
    except botocore.exceptions.ClientError as e:
        return e.response["Error"]["Code"]
def curl(key):
    return subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"{ep}/{b}/{key}"], capture_output=True, text=True).stdout
owner.create_bucket(Bucket=b)
owner.put_object(Bucket=b, Key="k", Body=b"owner's")
# by default: only the owner, and nothing anonymous
assert code(alice.get_object, Bucket=b, Key="k") == "AccessDenied"
assert code(bob.put_object, Bucket=b, Key="x", Body=b"x") == "AccessDenied"
assert curl("k") == "403", curl("k")
assert code(owner.get_bucket_policy, Bucket=b) == "NoSuchBucketPolicy"
# ACLs are disabled (BucketOwnerEnforced) until ownership says otherwise
assert owner.get_bucket_ownership_controls(Bucket=b)["OwnershipControls"]["Rules"][0]["ObjectOwnership"] == "BucketOwnerEnforced"
assert code(owner.put_object, Bucket=b, Key="pub", Body=b"p", ACL="public-read") == "AccessControlListNotSupported"
owner.put_bucket_ownership_controls(Bucket=b, OwnershipControls={"Rules": [{"ObjectOwnership": "ObjectWriter"}]})
owner.put_object(Bucket=b, Key="pub", Body=b"public bytes", ACL="public-read")
owner.put_object(Bucket=b, Key="priv", Body=b"private bytes", ACL="private")
assert curl("pub") == "200" and curl("priv") == "403", (curl("pub"), curl("priv"))
out = subprocess.run(["curl", "-s", f"{ep}/{b}/pub"], capture_output=True).stdout
assert out == b"public bytes", out
# the policy: bob may not put; every named user (by ARN and by access key) may get
policy = {"Version": "2012-10-17", "Statement": [
    {"Sid": "NoPutForBob", "Effect": "Deny", "Principal": {"AWS": ["arn:aws:iam::123456789012:user/checkBOB"]},
     "Action": "s3:PutObject", "Resource": f"arn:aws:s3:::{b}/*"},
    {"Sid": "PutForAll", "Effect": "Allow", "Principal": {"AWS": ["AKIACHECKALICE00000", "AKIACHECKBOB00000"]},
     "Action": ["s3:Put*"], "Resource": f"arn:aws:s3:::{b}/*"},
    {"Sid": "GetForUsers", "Effect": "Allow", "Principal": {"AWS": ["arn:aws:iam::1:user/checkALICE", "AKIACHECKBOB00000"]},
     "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{b}/*"}]}
owner.put_bucket_policy(Bucket=b, Policy=json.dumps(policy))
assert "AKIACHECKBOB00000" in owner.get_bucket_policy(Bucket=b)["Policy"]
assert owner.get_bucket_policy_status(Bucket=b)["PolicyStatus"]["IsPublic"] is False
assert alice.get_object(Bucket=b, Key="k")["Body"].read() == b"owner's"
assert bob.get_object(Bucket=b, Key="k")["Body"].read() == b"owner's"
assert code(bob.put_object, Bucket=b, Key="bob", Body=b"x") == "AccessDenied"  # explicit Deny beats the Allow
alice.put_object(Bucket=b, Key="alice", Body=b"a")
owner.put_object(Bucket=b, Key="owner2", Body=b"o")  # the owner keeps its rights
assert curl("k") == "403" and curl("pub") == "200"
# removing the policy restores the grants before it
owner.delete_bucket_policy(Bucket=b)
assert code(owner.get_bucket_policy, Bucket=b) == "NoSuchBucketPolicy"
assert code(alice.get_object, Bucket=b, Key="k") == "AccessDenied"
assert code(alice.put_object, Bucket=b, Key="alice2", Body=b"a") == "AccessDenied"
assert alice.get_object(Bucket=b, Key="pub")["Body"].read() == b"public bytes"
assert curl("pub") == "200" and curl("priv") == "403"
owner.put_object_acl(Bucket=b, Key="pub", ACL="private")
assert curl("pub") == "403"
assert code(boto3.client("s3", endpoint_url=ep, config=botocore.config.Config(signature_version=botocore.UNSIGNED)).list_objects_v2, Bucket=b) == "AccessDenied"
PY
  # ACL documents as S3 writes them; x-amz-grant-* headers; the meta service's
  # grants (spindle admin grant) over S3; ListBuckets showing owned and granted.
  check "boto3 acls and grants" "$S3_VENV/bin/python" - "$S3_ENDPOINT" "$B-perm" "$SPINDLE" "127.0.0.1:$META_PORT" "$(insecure admin grant)" <<'PY'
import subprocess, sys, time, boto3, botocore
ep, b, spindle, meta, insecure = sys.argv[1:]
cfg = botocore.config.Config(retries={"max_attempts": 1})
owner = boto3.client("s3", endpoint_url=ep, config=cfg)
user = lambda u: boto3.client("s3", endpoint_url=ep, config=cfg, aws_access_key_id=f"AKIACHECK{u}00000",
                              aws_secret_access_key=f"check-{u}-secret-0123456789abcdef")
alice, bob = user("ALICE"), user("BOB")
ALL = "http://acs.amazonaws.com/groups/global/AllUsers"
def code(f, *a, **k):
    try:
        f(*a, **k); return "OK"
    except botocore.exceptions.ClientError as e:
        return e.response["Error"]["Code"]
def curl(key):
    return subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"{ep}/{b}/{key}"], capture_output=True, text=True).stdout
def within(what, cond):  # the gateway's permissions cache: 1 s
    for _ in range(100):
        if cond(): return
        time.sleep(0.1)
    raise SystemExit(what + ": not within 10 s")
me = owner.list_buckets()["Owner"]["ID"]
# GetObjectAcl / GetBucketAcl: AccessControlPolicy, typed grantees
owner.put_object(Bucket=b, Key="acl", Body=b"acl bytes", ACL="public-read")
acl = owner.get_object_acl(Bucket=b, Key="acl")
assert acl["Owner"]["ID"] == me, acl
grants = {(g["Grantee"]["Type"], g["Grantee"].get("ID") or g["Grantee"].get("URI"), g["Permission"]) for g in acl["Grants"]}
assert grants == {("CanonicalUser", me, "FULL_CONTROL"), ("Group", ALL, "READ")}, grants
# x-amz-grant-* on PutObjectAcl: alice may read, bob not, nobody anonymous
owner.put_object_acl(Bucket=b, Key="acl", GrantRead='id="AKIACHECKALICE00000"', GrantReadACP='id="AKIACHECKALICE00000"')
assert alice.get_object(Bucket=b, Key="acl")["Body"].read() == b"acl bytes"
assert code(bob.get_object, Bucket=b, Key="acl") == "AccessDenied" and curl("acl") == "403"
grants = {(g["Grantee"]["Type"], g["Grantee"].get("ID") or g["Grantee"].get("URI"), g["Permission"]) for g in alice.get_object_acl(Bucket=b, Key="acl")["Grants"]}
assert ("CanonicalUser", "AKIACHECKALICE00000", "READ") in grants and len(grants) == 3, grants
assert code(owner.put_object_acl, Bucket=b, Key="acl", GrantRead='emailAddress="a@example.com"') == "InvalidArgument"
assert code(owner.put_object_acl, Bucket=b, Key="acl", GrantRead='id="AKIANOSUCHUSER00000"') == "InvalidArgument"
# x-amz-grant-* on PutObject: a group by URI
owner.put_object(Bucket=b, Key="hdr", Body=b"hdr", GrantRead=f'uri="{ALL}"')
assert curl("hdr") == "200", curl("hdr")
assert code(owner.put_object, Bucket=b, Key="hdr2", Body=b"x", ACL="public-read", GrantRead=f'uri="{ALL}"') != "OK"
# x-amz-grant-* on PutBucketAcl: bob may list; GetBucketAcl names him and the owner
owner.put_bucket_acl(Bucket=b, GrantRead='id="AKIACHECKBOB00000"', GrantFullControl=f'id="{me}"')
within("bob listing with a bucket ACL grant", lambda: code(bob.list_objects_v2, Bucket=b) == "OK")
bacl = owner.get_bucket_acl(Bucket=b)
assert bacl["Owner"]["ID"] == me, bacl
grants = {(g["Grantee"]["Type"], g["Grantee"].get("ID") or g["Grantee"].get("URI"), g["Permission"]) for g in bacl["Grants"]}
assert ("CanonicalUser", "AKIACHECKBOB00000", "READ") in grants and ("CanonicalUser", me, "FULL_CONTROL") in grants, grants
owner.put_bucket_acl(Bucket=b, ACL="private")
within("bob refused again", lambda: code(bob.list_objects_v2, Bucket=b) == "AccessDenied")
# the meta service's grants: bob reads with a read grant, writes with write, and sees the bucket
owner.put_object(Bucket=b, Key="g", Body=b"granted")
assert code(bob.get_object, Bucket=b, Key="g") == "AccessDenied"
assert b not in [x["Name"] for x in bob.list_buckets()["Buckets"]]
def grant(action):
    args = [spindle, "admin", "grant", "user:checkBOB", b, action, "--meta", meta] + ([insecure] if insecure else [])
    subprocess.run(args, check=True, capture_output=True)
grant("read")
within("bob reading with a read grant", lambda: code(bob.get_object, Bucket=b, Key="g") == "OK")
assert b in [x["Name"] for x in bob.list_buckets()["Buckets"]]
assert code(bob.put_object, Bucket=b, Key="bobs", Body=b"x") == "AccessDenied"
grant("write")
within("bob writing with a write grant", lambda: code(bob.put_object, Bucket=b, Key="bobs", Body=b"x") == "OK")
assert code(bob.delete_object, Bucket=b, Key="g") == "AccessDenied"
PY
fi

# rclone: sync a tree of 200 files and check it
for i in $(seq 200); do head -c $((RANDOM * 4)) /dev/urandom >"$D/tree/t$i"; done
export RCLONE_CONFIG=/dev/null RCLONE_CONFIG_SPN_TYPE=s3 RCLONE_CONFIG_SPN_PROVIDER=Other RCLONE_CONFIG_SPN_ENDPOINT=$S3_ENDPOINT \
  RCLONE_CONFIG_SPN_ACCESS_KEY_ID=$S3_ACCESS_KEY RCLONE_CONFIG_SPN_SECRET_ACCESS_KEY=$S3_SECRET_KEY RCLONE_CONFIG_SPN_REGION=us-east-1
check "rclone sync" timeout 300 env -u AWS_CA_BUNDLE rclone sync "$D/tree" "spn:$B/tree"
check "rclone check" timeout 300 env -u AWS_CA_BUNDLE rclone check --download "$D/tree" "spn:$B/tree"

RESULT="s3-clients: $ok/$n client operations byte-exact${fails:+; failed: ${fails[*]}}"
[[ $ok == "$n" ]]
