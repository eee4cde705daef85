"""S3 bucket lifecycle (issue 35 item 3) with boto3 against an S3 endpoint:
Put/Get/DeleteBucketLifecycleConfiguration and S3's refusals of bad
configurations (MalformedXML, InvalidArgument, NotImplemented for
transitions); with LIFECYCLE_DAY set (the server's --lifecycle-day in
seconds, short: a test server), the rules at work: objects expire (by
prefix and by tag), noncurrent versions expire keeping
NewerNoncurrentVersions, expired delete markers are removed and an
incomplete multipart upload is aborted. Run by scripts/s3-clients.sh
(make test-s3):

    python s3_lifecycle.py ENDPOINT BUCKET-PREFIX

Credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY. Exit status
1 when a test fails."""
import os
import sys
import time

import boto3
from botocore.config import Config
from s3check import code, run, test

EP, PREFIX = sys.argv[1], sys.argv[2]
DAY = float(os.environ.get("LIFECYCLE_DAY", "0"))
s3 = boto3.client("s3", endpoint_url=EP, config=Config(retries={"max_attempts": 1}, s3={"addressing_style": "path"}))


def bucket(name, versioned=False):
    b = f"{PREFIX}-{name}"
    s3.create_bucket(Bucket=b)
    if versioned:
        s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
    return b


def lc(b, *rules):
    s3.put_bucket_lifecycle_configuration(Bucket=b, LifecycleConfiguration={"Rules": list(rules)})


def until(cond, what, days=6):
    """Polls cond until it holds, for at most days lifecycle days plus a
    margin for the runs (bounded; never a fixed sleep as the check)."""
    deadline = time.time() + days * DAY + 60
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.25)
    raise AssertionError(f"not within the deadline: {what}")


def versions(b):
    r = s3.list_object_versions(Bucket=b)
    return [(v["Key"], v["VersionId"]) for v in r.get("Versions", [])], [(m["Key"], m["VersionId"]) for m in r.get("DeleteMarkers", [])]


def keys(b):
    return [o["Key"] for o in s3.list_objects_v2(Bucket=b).get("Contents", [])]


def cleanup(b):
    vs, ms = versions(b)
    objs = [{"Key": k, "VersionId": v} for k, v in vs + ms]
    if objs:
        s3.delete_objects(Bucket=b, Delete={"Objects": objs})
    for u in s3.list_multipart_uploads(Bucket=b).get("Uploads", []):
        s3.abort_multipart_upload(Bucket=b, Key=u["Key"], UploadId=u["UploadId"])
    s3.delete_bucket(Bucket=b)


@test
def put_get_delete():
    b = bucket("conf")
    assert code(s3.get_bucket_lifecycle_configuration, Bucket=b) == "NoSuchLifecycleConfiguration"
    lc(b, {"ID": "logs", "Filter": {"Prefix": "logs/"}, "Status": "Enabled", "Expiration": {"Days": 30}},
       {"ID": "mpu", "Filter": {}, "Status": "Enabled", "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7}},
       {"ID": "old", "Filter": {"And": {"Prefix": "a/", "Tags": [{"Key": "t", "Value": "v"}]}}, "Status": "Disabled",
        "NoncurrentVersionExpiration": {"NoncurrentDays": 3, "NewerNoncurrentVersions": 2}},
       {"Filter": {"Tag": {"Key": "tmp", "Value": "1"}}, "Status": "Enabled", "Expiration": {"Date": "2030-01-01T00:00:00Z"}})
    rules = s3.get_bucket_lifecycle_configuration(Bucket=b)["Rules"]
    assert [r["ID"] for r in rules[:3]] == ["logs", "mpu", "old"], rules
    assert rules[0]["Expiration"]["Days"] == 30 and rules[0]["Filter"]["Prefix"] == "logs/"
    assert rules[1]["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"] == 7
    assert rules[2]["Status"] == "Disabled" and rules[2]["NoncurrentVersionExpiration"]["NewerNoncurrentVersions"] == 2
    assert rules[2]["Filter"]["And"]["Tags"] == [{"Key": "t", "Value": "v"}]
    assert rules[3]["ID"], "a rule without an ID gets one"
    s3.delete_bucket_lifecycle(Bucket=b)
    assert code(s3.get_bucket_lifecycle_configuration, Bucket=b) == "NoSuchLifecycleConfiguration"
    s3.delete_bucket_lifecycle(Bucket=b)  # none: no error
    assert code(s3.get_bucket_lifecycle_configuration, Bucket=f"{PREFIX}-none") == "NoSuchBucket"
    cleanup(b)


@test
def refusals():
    b = bucket("bad")
    exp = {"Days": 1}
    cases = [
        ("InvalidArgument", [{"ID": "x", "Filter": {}, "Status": "Enabled", "Expiration": {"Days": 0}}]),
        ("InvalidArgument", [{"ID": "x", "Filter": {}, "Status": "Enabled", "Expiration": exp},
                             {"ID": "x", "Filter": {}, "Status": "Enabled", "Expiration": exp}]),
        ("InvalidArgument", [{"ID": "i" * 256, "Filter": {}, "Status": "Enabled", "Expiration": exp}]),
        ("InvalidArgument", [{"ID": "x", "Filter": {}, "Status": "Enabled"}]),
        ("InvalidArgument", [{"ID": "x", "Filter": {"Tag": {"Key": "a", "Value": "b"}}, "Status": "Enabled",
                              "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}}]),
        ("InvalidArgument", [{"ID": "x", "Filter": {}, "Status": "Enabled", "Expiration": {"Date": "2030-01-01T12:00:00Z"}}]),
        ("MalformedXML", [{"ID": "x", "Filter": {}, "Status": "On", "Expiration": exp}]),
        ("MalformedXML", [{"ID": "x", "Filter": {}, "Status": "Enabled", "Expiration": {"Days": 1, "ExpiredObjectDeleteMarker": True}}]),
        ("NotImplemented", [{"ID": "x", "Filter": {}, "Status": "Enabled", "Transitions": [{"Days": 1, "StorageClass": "GLACIER"}]}]),
        ("InvalidArgument", [{"ID": f"r{i}", "Filter": {}, "Status": "Enabled", "Expiration": exp} for i in range(1001)]),
    ]
    for want, rules in cases:
        got = code(s3.put_bucket_lifecycle_configuration, Bucket=b, LifecycleConfiguration={"Rules": rules})
        assert got == want, (want, got, rules[:2])
    assert code(s3.get_bucket_lifecycle_configuration, Bucket=b) == "NoSuchLifecycleConfiguration"
    cleanup(b)


@test
def expiration_at_work():
    if not DAY:
        print("  (LIFECYCLE_DAY unset: the server's day is S3's; expiry not waited for)")
        return
    b = bucket("exp")
    for k in ["tmp/a", "tmp/b", "keep/c"]:
        s3.put_object(Bucket=b, Key=k, Body=b"x" * 1000)
    s3.put_object(Bucket=b, Key="tagged", Body=b"y", Tagging="expire=yes")
    s3.put_object(Bucket=b, Key="untagged", Body=b"y", Tagging="expire=no")
    lc(b, {"ID": "tmp", "Filter": {"Prefix": "tmp/"}, "Status": "Enabled", "Expiration": {"Days": 1}},
       {"ID": "tag", "Filter": {"Tag": {"Key": "expire", "Value": "yes"}}, "Status": "Enabled", "Expiration": {"Days": 1}})
    until(lambda: keys(b) == ["keep/c", "untagged"], "tmp/* and the tagged object expired, the others kept")
    cleanup(b)


@test
def noncurrent_and_markers():
    if not DAY:
        return
    b = bucket("nc", versioned=True)
    ids = [s3.put_object(Bucket=b, Key="k", Body=str(i).encode())["VersionId"] for i in range(5)]
    s3.put_object(Bucket=b, Key="gone", Body=b"z")
    s3.delete_object(Bucket=b, Key="gone")  # a delete marker over one version
    lc(b, {"ID": "nc", "Filter": {"Prefix": "k"}, "Status": "Enabled",
           "NoncurrentVersionExpiration": {"NoncurrentDays": 1, "NewerNoncurrentVersions": 2}},
       {"ID": "nc-gone", "Filter": {"Prefix": "gone"}, "Status": "Enabled", "NoncurrentVersionExpiration": {"NoncurrentDays": 1}},
       {"ID": "dm", "Filter": {}, "Status": "Enabled", "Expiration": {"ExpiredObjectDeleteMarker": True}})
    # k keeps its current version and its two newest noncurrent ones;
    # gone's only version goes (noncurrent), then its marker (then alone)
    until(lambda: versions(b) == ([("k", ids[4]), ("k", ids[3]), ("k", ids[2])], []), "noncurrent versions and the delete marker expired")
    assert s3.get_object(Bucket=b, Key="k")["Body"].read() == b"4"
    cleanup(b)


@test
def current_version_in_versioned_bucket():
    if not DAY:
        return
    b = bucket("cv", versioned=True)
    v = s3.put_object(Bucket=b, Key="doc", Body=b"d")["VersionId"]
    lc(b, {"ID": "e", "Filter": {"Prefix": "doc"}, "Status": "Enabled", "Expiration": {"Days": 1}})
    until(lambda: versions(b)[1] != [], "a delete marker added")
    vs, ms = versions(b)
    assert vs == [("doc", v)] and len(ms) == 1, (vs, ms)
    assert code(s3.head_object, Bucket=b, Key="doc") in ("404", "NoSuchKey")
    cleanup(b)


@test
def abort_multipart():
    if not DAY:
        return
    b = bucket("mpu")
    up = s3.create_multipart_upload(Bucket=b, Key="big")["UploadId"]
    s3.upload_part(Bucket=b, Key="big", UploadId=up, PartNumber=1, Body=b"p" * (5 << 20))
    lc(b, {"ID": "mpu", "Filter": {"Prefix": ""}, "Status": "Enabled", "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}})
    until(lambda: not s3.list_multipart_uploads(Bucket=b).get("Uploads"), "the upload aborted")
    assert code(s3.list_parts, Bucket=b, Key="big", UploadId=up) == "NoSuchUpload"
    cleanup(b)


run("s3_lifecycle")
