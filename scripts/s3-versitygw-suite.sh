#!/usr/bin/env bash
# versitygw's own integration test suite (the `versitygw test` command of
# github.com/versity/versitygw at the version in go.mod) against Spindle's S3
# gateway, test by test, for the groups of the S3 API that Spindle serves
# (objects, buckets, listings, multipart, checksums, SigV4 in all its forms,
# presigned URLs, object and bucket tagging, CORS, browser form uploads). A test that fails and is not listed in
# scripts/s3-versitygw-known-failures.txt (with the reason) fails the run;
# a listed test that passes is reported, to be taken off the list.
#   make test-s3-suite            (about 10 minutes on a 2-core VM)
#   VGW_TESTS='PutObject_*' ...   only the tests matching that glob
#   VGW_GROUPS='WORMProtection|PutObjectRetention' ...   only these groups
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/versitygw.sh
WORK=$(mktemp -d /tmp/spindle-vgw-suite.XXXXXX)
SHM=$(mktemp -d /dev/shm/spindle-vgw-suite.XXXXXX)
SRV=""
cleanup() {
  rc=$?
  stop_group "$SRV"
  rm -rf "$WORK" "$SHM"
  exit $rc
}
trap cleanup EXIT
versitygw_ensure "$WORK" s3-versitygw-suite
cache=$(dirname "$VGW_BIN")
go build -o "$WORK/spindle" ./cmd/spindle
read -r META_PORT S3_PORT <<<"$(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]; print(*[x.getsockname()[1] for x in s])')"
AK=AKIAVERSITYGWSUITE01 SK=versitygw-suite-secret-0123456789abcdef
EP="http://127.0.0.1:$S3_PORT"
# --insecure: plain http, as the suite is configured; it checks S3 compatibility, not TLS
start_server() {
  SPINDLE_S3_ACCESS_KEY=$AK SPINDLE_S3_SECRET_KEY=$SK setsid "$WORK/spindle" server --insecure --dir "$SHM/srv" \
    --meta-listen "127.0.0.1:$META_PORT" --s3-listen "127.0.0.1:$S3_PORT" >"$WORK/server.log" 2>&1 &
  SRV=$!
  for _ in $(seq 120); do
    curl -s -o /dev/null "$EP/" && break
    kill -0 "$SRV" 2>/dev/null || { tail -5 "$WORK/server.log"; echo "s3-versitygw-suite: the server ended"; exit 1; }
    sleep 1
  done
}
start_server
groups=${VGW_GROUPS:-'Authentication|PresignedAuth|CreateBucket|HeadBucket|DeleteBucket|ListBuckets|GetBucketLocation|PutObject|GetObject|HeadObject|DeleteObject|DeleteObjects|CopyObject|ListObjects|ListObjectsV2|ListObjectVersions|PutBucketVersioning|GetBucketVersioning|Versioning|CreateMultipartUpload|UploadPart|UploadPartCopy|ListParts|ListMultipartUploads|CompleteMultipartUpload|AbortMultipartUpload|GetObjectAttributes|SignedStreamingPayload|SignedStreamingPayloadTrailer|UnsignedStreamingPayloadTrailer|PutObjectTagging|GetObjectTagging|DeleteObjectTagging|PutBucketTagging|GetBucketTagging|DeleteBucketTagging|PutBucketCors|GetBucketCors|DeleteBucketCors|PreflightOPTIONS|CORSMiddleware|PostObject|PutObjectLockConfiguration|GetObjectLockConfiguration|PutObjectRetention|GetObjectRetention|PutObjectLegalHold|GetObjectLegalHold|WORMProtection'}
env -u AWS_CA_BUNDLE "$cache/versitygw" test --help 2>&1 | awk '/Runs .* integration test/{print $1}' | grep -E "^($groups)_" |
  while read -r t; do if [[ $t == ${VGW_TESTS:-*} ]]; then echo "$t"; fi; done >"$WORK/tests"
known=scripts/s3-versitygw-known-failures.txt
total=$(wc -l <"$WORK/tests"); i=0; pass=0; new=(); fixed=()
while read -r t; do
  i=$((i+1))
  # from its own directory: some tests run ./versitygw (its admin commands)
  # the versioning tests clean up by listing versions (their own flag)
  # and so do the object lock tests: a bucket with object lock is versioned (S3)
  vflag=(); [[ $t == *Versioning_* || $t == ListObjectVersions_* || $t =~ [Ll]ock|[Rr]etention|[Ll]egal[Hh_]|WORM|PutObject_racey ]] && vflag=(--versioning-enabled)
  if (cd "$cache" && timeout 120 env -u AWS_CA_BUNDLE ./versitygw test -a "$AK" -s "$SK" -e "$EP" "$t" "${vflag[@]}") >"$WORK/t.log" 2>&1; then
    pass=$((pass+1)); echo "PASS $t" >>"$WORK/results"
    grep -q "^$t " "$known" && fixed+=("$t")
  else
    echo "FAIL $t" >>"$WORK/results"
    if ! grep -q "^$t " "$known"; then
      new+=("$t"); echo "--- $t (not a known failure):"; sed 's/\x1b\[[0-9;]*m//g' "$WORK/t.log" | grep -v '^RUN' | head -3 | cut -c1-400
    fi
    # A failed test may leave its buckets behind; the next tests need them gone.
    "$WORK/spindle" bucket ls --meta "127.0.0.1:$META_PORT" 2>/dev/null | awk 'NR>1{print $1}' |
      while read -r b; do "$WORK/spindle" bucket rm --force --meta "127.0.0.1:$META_PORT" "$b" >/dev/null 2>&1 || true; done
    # A bucket holding a locked version cannot be emptied (object lock): start
    # the next tests on a new server.
    if [[ -n $("$WORK/spindle" bucket ls --meta "127.0.0.1:$META_PORT" 2>/dev/null | awk 'NR>1') ]]; then
      stop_group "$SRV"; rm -rf "$SHM/srv"; start_server
    fi
  fi
  (( i % 50 == 0 )) && echo "$(date +%T)  $i/$total tests, $pass passed"
done <"$WORK/tests"
cp "$WORK/results" "${VGW_RESULTS:-/dev/null}"
awk '{split($2,a,"_"); g[a[1]]++; if($1=="PASS")p[a[1]]++} END{for(k in g) printf "  %-34s %3d/%3d\n", k, p[k], g[k]}' "$WORK/results" | sort
echo "s3-versitygw-suite: $pass/$total of versitygw $VGW_VERSION's tests passed against Spindle's gateway;" \
  "${#new[@]} failed that are not known failures${new:+ (${new[*]})}"
(( ${#fixed[@]} == 0 )) || echo "known failures that now pass (take them off $known): ${fixed[*]}"
(( ${#new[@]} == 0 ))
