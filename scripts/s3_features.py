"""S3 tagging, CORS, conditional writes, presigned POST and metadata kept
across copies, with boto3 (and urllib3, botocore's HTTP library, for the
requests a browser makes itself: a CORS preflight, a form POST), against
an S3 endpoint. Run by scripts/s3-clients.sh (make test-s3):

    python s3_features.py ENDPOINT BUCKET-PREFIX

Credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY. Each test
makes its own bucket; the exit status is 1 when one fails."""
import sys
import threading
import urllib.parse

import boto3
import botocore
import urllib3
from botocore.config import Config
from s3check import code, run, test

EP, PREFIX = sys.argv[1], sys.argv[2]
# s3v4: boto3 signs a presigned POST with SigV2 unless told (the gateway
# takes SigV4 POST policies only)
s3 = boto3.client("s3", endpoint_url=EP, config=Config(retries={"max_attempts": 1}, s3={"addressing_style": "path"}, signature_version="s3v4"))
http = urllib3.PoolManager()


def bucket(name):
    b = f"{PREFIX}-{name}"
    s3.create_bucket(Bucket=b)
    return b


def tagset(d):
    return {"TagSet": [{"Key": k, "Value": v} for k, v in d.items()]}


def tags_of(b, k):
    return {t["Key"]: t["Value"] for t in s3.get_object_tagging(Bucket=b, Key=k)["TagSet"]}


@test
def object_tagging():
    b = bucket("tags")
    s3.put_object(Bucket=b, Key="k", Body=b"v", Tagging="project=alpha&stage=prod")
    assert s3.get_object(Bucket=b, Key="k")["TagCount"] == 2
    assert tags_of(b, "k") == {"project": "alpha", "stage": "prod"}
    # lengths are Unicode characters: 128 and 256 of them, 2 bytes each
    uk, uv = "é" * 128, "ü" * 256
    s3.put_object(Bucket=b, Key="u", Body=b"v", Tagging=urllib.parse.urlencode({uk: uv}))
    assert tags_of(b, "u") == {uk: uv}
    s3.put_object_tagging(Bucket=b, Key="k", Tagging=tagset({"only": "one"}))
    assert tags_of(b, "k") == {"only": "one"}
    assert code(s3.put_object_tagging, Bucket=b, Key="k", Tagging=tagset({f"k{i}": "v" for i in range(11)})) == "BadRequest"
    dup = {"TagSet": [{"Key": "d", "Value": "1"}, {"Key": "d", "Value": "2"}]}
    assert code(s3.put_object_tagging, Bucket=b, Key="k", Tagging=dup) == "InvalidTag"
    assert code(s3.put_object_tagging, Bucket=b, Key="k", Tagging=tagset({"k" * 129: "v"})) == "InvalidTag"
    assert code(s3.put_object_tagging, Bucket=b, Key="k", Tagging=tagset({"k": "v" * 257})) == "InvalidTag"
    assert code(s3.put_object_tagging, Bucket=b, Key="k", Tagging=tagset({"k": "v*"})) == "InvalidTag"
    assert code(s3.put_object, Bucket=b, Key="x", Body=b"v", Tagging="a=1&a=2") == "InvalidArgument"
    assert code(s3.put_object_tagging, Bucket=b, Key="missing", Tagging=tagset({"a": "b"})) == "NoSuchKey"
    s3.copy_object(Bucket=b, Key="copied", CopySource=f"{b}/k")
    assert tags_of(b, "copied") == {"only": "one"}
    s3.copy_object(Bucket=b, Key="replaced", CopySource=f"{b}/k", TaggingDirective="REPLACE", Tagging="new=1")
    assert tags_of(b, "replaced") == {"new": "1"}
    s3.delete_object_tagging(Bucket=b, Key="k")
    assert tags_of(b, "k") == {} and "TagCount" not in s3.head_object(Bucket=b, Key="k")


@test
def bucket_tagging():
    b = bucket("btags")
    assert code(s3.get_bucket_tagging, Bucket=b) == "NoSuchTagSet"
    fifty = {f"k{i}": str(i) for i in range(50)}
    s3.put_bucket_tagging(Bucket=b, Tagging=tagset(fifty))
    got = {t["Key"]: t["Value"] for t in s3.get_bucket_tagging(Bucket=b)["TagSet"]}
    assert got == fifty, got
    assert code(s3.put_bucket_tagging, Bucket=b, Tagging=tagset({**fifty, "k50": "x"})) == "BadRequest"
    s3.delete_bucket_tagging(Bucket=b)
    assert code(s3.get_bucket_tagging, Bucket=b) == "NoSuchTagSet"


def preflight(b, key, origin, method, headers=None):
    h = {"Origin": origin, "Access-Control-Request-Method": method}
    if headers:
        h["Access-Control-Request-Headers"] = headers
    return http.request("OPTIONS", f"{EP}/{b}/{key}", headers=h)


@test
def cors():
    b = bucket("cors")
    assert code(s3.get_bucket_cors, Bucket=b) == "NoSuchCORSConfiguration"
    rule = {"AllowedOrigins": ["https://*.example.com"], "AllowedMethods": ["GET", "PUT"],
            "AllowedHeaders": ["content-type", "x-amz-meta-*"], "ExposeHeaders": ["ETag", "x-amz-meta-color"], "MaxAgeSeconds": 300}
    s3.put_bucket_cors(Bucket=b, CORSConfiguration={"CORSRules": [rule]})
    got = s3.get_bucket_cors(Bucket=b)["CORSRules"][0]
    assert got["AllowedOrigins"] == rule["AllowedOrigins"] and got["MaxAgeSeconds"] == 300, got
    r = preflight(b, "k", "https://app.example.com", "PUT", "content-type,x-amz-meta-color")
    assert r.status == 200, (r.status, r.data)
    assert r.headers.get("Access-Control-Allow-Origin") == "https://app.example.com", dict(r.headers)
    assert "PUT" in r.headers.get("Access-Control-Allow-Methods", "") and r.headers.get("Access-Control-Max-Age") == "300", dict(r.headers)
    for origin, method, hdrs in [("https://evil.test", "GET", None), ("https://app.example.com", "DELETE", None),
                                 ("https://app.example.com", "GET", "x-not-allowed")]:
        r = preflight(b, "k", origin, method, hdrs)
        assert r.status == 403 and "Access-Control-Allow-Origin" not in r.headers, (origin, method, r.status, dict(r.headers))
    s3.put_object(Bucket=b, Key="k", Body=b"v", Metadata={"color": "red"})
    url = s3.generate_presigned_url("get_object", Params={"Bucket": b, "Key": "k"}, ExpiresIn=300)
    r = http.request("GET", url, headers={"Origin": "https://app.example.com"})
    assert r.status == 200 and r.headers.get("Access-Control-Allow-Origin") == "https://app.example.com", (r.status, dict(r.headers))
    assert "x-amz-meta-color" in r.headers.get("Access-Control-Expose-Headers", ""), dict(r.headers)
    s3.delete_bucket_cors(Bucket=b)
    assert code(s3.get_bucket_cors, Bucket=b) == "NoSuchCORSConfiguration"


def race(n, write):
    """n writers released at once; their error codes (None: succeeded)."""
    gate, out = threading.Barrier(n), [None] * n

    def run(i):
        gate.wait()
        out[i] = code(write, i)
    ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


@test
def conditional_writes():
    b = bucket("cond")
    for size in (10, 300_000):
        key = f"race-{size}"
        got = race(8, lambda i: s3.put_object(Bucket=b, Key=key, Body=bytes([i]) * size, IfNoneMatch="*"))
        assert got.count(None) == 1 and got.count("PreconditionFailed") == 7, got
    etag = s3.put_object(Bucket=b, Key="k", Body=b"x", IfNoneMatch="*")["ETag"]
    assert code(s3.put_object, Bucket=b, Key="k", Body=b"x", IfMatch='"0000"') == "PreconditionFailed"
    s3.put_object(Bucket=b, Key="k", Body=b"y", IfMatch=etag)
    assert code(s3.put_object, Bucket=b, Key="absent", Body=b"x", IfMatch=etag) == "NoSuchKey"
    # two multipart uploads of one key completed at once with If-None-Match *
    ups = []
    for _ in range(2):
        u = s3.create_multipart_upload(Bucket=b, Key="mp")["UploadId"]
        p = s3.upload_part(Bucket=b, Key="mp", UploadId=u, PartNumber=1, Body=b"part")
        ups.append((u, [{"PartNumber": 1, "ETag": p["ETag"]}]))
    got = race(2, lambda i: s3.complete_multipart_upload(Bucket=b, Key="mp", UploadId=ups[i][0],
                                                         MultipartUpload={"Parts": ups[i][1]}, IfNoneMatch="*"))
    assert sorted(got, key=str) == [None, "PreconditionFailed"], got


@test
def presigned_post():
    b = bucket("post")
    post = s3.generate_presigned_post(
        Bucket=b, Key="uploads/${filename}",
        Fields={"x-amz-meta-owner": "alice", "Content-Type": "text/plain", "success_action_status": "201"},
        Conditions=[["starts-with", "$key", "uploads/"], ["content-length-range", 1, 1024],
                    {"x-amz-meta-owner": "alice"}, ["starts-with", "$Content-Type", "text/"], {"success_action_status": "201"}],
        ExpiresIn=600)
    fields = dict(post["fields"])
    r = http.request("POST", post["url"], fields={**fields, "file": ("report.txt", b"posted by a form", "text/plain")})
    assert r.status == 201 and b"<Key>uploads/report.txt</Key>" in r.data, (r.status, r.data)
    h = s3.head_object(Bucket=b, Key="uploads/report.txt")
    assert h["Metadata"] == {"owner": "alice"} and h["ContentType"] == "text/plain", h
    assert s3.get_object(Bucket=b, Key="uploads/report.txt")["Body"].read() == b"posted by a form"
    r = http.request("POST", post["url"], fields={**fields, "file": ("big.txt", b"x" * 2000, "text/plain")})
    assert r.status == 400 and b"EntityTooLarge" in r.data, (r.status, r.data)
    r = http.request("POST", post["url"], fields={**fields, "x-amz-meta-owner": "mallory", "file": ("m.txt", b"x", "text/plain")})
    assert r.status == 403, (r.status, r.data)
    # success_action_redirect: 303 to it, with bucket, key and ETag
    red = s3.generate_presigned_post(Bucket=b, Key="r.txt", Fields={"success_action_redirect": "http://127.0.0.1/done"},
                                     Conditions=[{"success_action_redirect": "http://127.0.0.1/done"}], ExpiresIn=600)
    r = http.request("POST", red["url"], fields={**red["fields"], "file": ("r.txt", b"r")}, redirect=False)
    loc = r.headers.get("Location", "")
    assert r.status == 303 and loc.startswith("http://127.0.0.1/done?") and "key=r.txt" in loc, (r.status, loc)


@test
def copies_keep_metadata():
    b = bucket("copymeta")
    s3.put_object(Bucket=b, Key="src", Body=b"a" * 1000, ContentType="text/csv", ContentEncoding="gzip",
                  ContentDisposition='attachment; filename="r.csv"', ContentLanguage="de", CacheControl="max-age=60",
                  Expires="Wed, 21 Oct 2037 07:28:00 GMT", Metadata={"a": "1", "unicode": "Hello World"}, ChecksumAlgorithm="SHA256")
    s3.copy_object(Bucket=b, Key="dst", CopySource=f"{b}/src")
    keep = ("ContentType", "ContentEncoding", "ContentDisposition", "ContentLanguage", "CacheControl", "ExpiresString", "Metadata", "ChecksumSHA256")
    src, dst = (s3.head_object(Bucket=b, Key=k, ChecksumMode="ENABLED") for k in ("src", "dst"))
    for f in keep:
        assert src.get(f) == dst.get(f) and src.get(f), (f, src.get(f), dst.get(f))


run("s3_features")
