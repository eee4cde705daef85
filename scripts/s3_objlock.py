"""S3 object lock (issue 35 item 2) with boto3 against an S3 endpoint:
buckets created with object lock (versioning on, not to be suspended),
PutObjectLockConfiguration on a versioned bucket and its default retention
on new versions, retention and legal hold on PUT, CopyObject and
multipart create and through their own calls, the lock on HEAD and GET,
and the refusals (AccessDenied) of deleting a locked version — by
DeleteObject and DeleteObjects with a version ID, COMPLIANCE even with
x-amz-bypass-governance-retention, a legal hold always — and of
shortening a retention; GOVERNANCE bypassed by the root user with the
header. Run by scripts/s3-clients.sh (make test-s3):

    python s3_objlock.py ENDPOINT BUCKET-PREFIX

Credentials (the root user's) from AWS_ACCESS_KEY_ID /
AWS_SECRET_ACCESS_KEY. Each test makes its own bucket; a bucket holding
a COMPLIANCE version stays (no one can empty it before its date: the
server under test is a scratch one). The exit status is 1 when a test
fails."""
import datetime
import sys

import boto3
from botocore.config import Config
from s3check import code, run, test

EP, PREFIX = sys.argv[1], sys.argv[2]
s3 = boto3.client("s3", endpoint_url=EP, config=Config(retries={"max_attempts": 1}, s3={"addressing_style": "path"}))


def later(days=1):
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0) + datetime.timedelta(days=days)


def locked_bucket(name):
    b = f"{PREFIX}-{name}"
    s3.create_bucket(Bucket=b, ObjectLockEnabledForBucket=True)
    return b


def refused(fn, **kw):
    c = code(fn, **kw)
    assert c == "AccessDenied", f"{fn.__name__}: want AccessDenied, got {c}"


@test
def create_with_lock():
    b = locked_bucket("create")
    assert s3.get_bucket_versioning(Bucket=b)["Status"] == "Enabled"
    c = s3.get_object_lock_configuration(Bucket=b)["ObjectLockConfiguration"]
    assert c["ObjectLockEnabled"] == "Enabled", c
    assert code(s3.put_bucket_versioning, Bucket=b, VersioningConfiguration={"Status": "Suspended"}) == "InvalidBucketState"
    plain = f"{PREFIX}-plain"
    s3.create_bucket(Bucket=plain)
    assert code(s3.get_object_lock_configuration, Bucket=plain) == "ObjectLockConfigurationNotFoundError"
    cfg = {"ObjectLockEnabled": "Enabled"}
    assert code(s3.put_object_lock_configuration, Bucket=plain, ObjectLockConfiguration=cfg) == "InvalidBucketState"
    c = code(s3.put_object, Bucket=plain, Key="k", Body=b"x", ObjectLockMode="GOVERNANCE", ObjectLockRetainUntilDate=later())
    assert c == "InvalidRequest", c
    c = code(s3.create_multipart_upload, Bucket=plain, Key="k", ObjectLockLegalHoldStatus="ON")
    assert c == "InvalidRequest", c
    s3.delete_bucket(Bucket=plain)
    s3.delete_bucket(Bucket=b)


@test
def default_retention_on_versioned_bucket():
    b = f"{PREFIX}-default"
    s3.create_bucket(Bucket=b)
    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
    s3.put_object_lock_configuration(Bucket=b, ObjectLockConfiguration={
        "ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 2}}})
    r = s3.get_object_lock_configuration(Bucket=b)["ObjectLockConfiguration"]["Rule"]["DefaultRetention"]
    assert r == {"Mode": "GOVERNANCE", "Days": 2}, r
    v = s3.put_object(Bucket=b, Key="k", Body=b"v1")["VersionId"]
    h = s3.head_object(Bucket=b, Key="k")
    assert h["ObjectLockMode"] == "GOVERNANCE", h
    until = h["ObjectLockRetainUntilDate"]
    assert later(1) < until <= later(2) + datetime.timedelta(minutes=5), until
    ret = s3.get_object_retention(Bucket=b, Key="k", VersionId=v)["Retention"]
    assert ret["Mode"] == "GOVERNANCE", ret
    refused(s3.delete_object, Bucket=b, Key="k", VersionId=v)
    s3.delete_object(Bucket=b, Key="k", VersionId=v, BypassGovernanceRetention=True)
    s3.delete_bucket(Bucket=b)


@test
def compliance_refusals():
    b = locked_bucket("compliance")
    v = s3.put_object(Bucket=b, Key="k", Body=b"keep", ObjectLockMode="COMPLIANCE", ObjectLockRetainUntilDate=later())["VersionId"]
    g = s3.get_object(Bucket=b, Key="k", VersionId=v)
    assert g["ObjectLockMode"] == "COMPLIANCE" and g["Body"].read() == b"keep", g
    refused(s3.delete_object, Bucket=b, Key="k", VersionId=v)
    refused(s3.delete_object, Bucket=b, Key="k", VersionId=v, BypassGovernanceRetention=True)
    r = s3.delete_objects(Bucket=b, Delete={"Objects": [{"Key": "k", "VersionId": v}]}, BypassGovernanceRetention=True)
    assert [e["Code"] for e in r.get("Errors", [])] == ["AccessDenied"], r
    refused(s3.put_object_retention, Bucket=b, Key="k", VersionId=v, Retention={"Mode": "COMPLIANCE", "RetainUntilDate": later() - datetime.timedelta(hours=1)})
    refused(s3.put_object_retention, Bucket=b, Key="k", VersionId=v, BypassGovernanceRetention=True,
            Retention={"Mode": "GOVERNANCE", "RetainUntilDate": later(2)})
    s3.put_object_retention(Bucket=b, Key="k", VersionId=v, Retention={"Mode": "COMPLIANCE", "RetainUntilDate": later(2)})  # extending: allowed
    m = s3.delete_object(Bucket=b, Key="k")  # no version ID: a delete marker, as S3
    assert m["DeleteMarker"], m
    assert s3.get_object(Bucket=b, Key="k", VersionId=v)["Body"].read() == b"keep"
    s3.delete_object(Bucket=b, Key="k", VersionId=m["VersionId"])  # the marker is no locked version
    assert s3.get_object(Bucket=b, Key="k")["Body"].read() == b"keep"


@test
def governance_bypass():
    b = locked_bucket("governance")
    v = s3.put_object(Bucket=b, Key="k", Body=b"g", ObjectLockMode="GOVERNANCE", ObjectLockRetainUntilDate=later())["VersionId"]
    refused(s3.delete_object, Bucket=b, Key="k", VersionId=v)
    r = s3.delete_objects(Bucket=b, Delete={"Objects": [{"Key": "k", "VersionId": v}]})
    assert [e["Code"] for e in r.get("Errors", [])] == ["AccessDenied"], r
    short = {"Mode": "GOVERNANCE", "RetainUntilDate": later() - datetime.timedelta(hours=1)}
    refused(s3.put_object_retention, Bucket=b, Key="k", VersionId=v, Retention=short)
    s3.put_object_retention(Bucket=b, Key="k", VersionId=v, Retention=short, BypassGovernanceRetention=True)
    assert s3.get_object_retention(Bucket=b, Key="k", VersionId=v)["Retention"]["RetainUntilDate"] == short["RetainUntilDate"]
    r = s3.delete_objects(Bucket=b, Delete={"Objects": [{"Key": "k", "VersionId": v}]}, BypassGovernanceRetention=True)
    assert not r.get("Errors") and len(r["Deleted"]) == 1, r
    s3.delete_bucket(Bucket=b)


@test
def legal_hold():
    b = locked_bucket("hold")
    v = s3.put_object(Bucket=b, Key="k", Body=b"h", ObjectLockLegalHoldStatus="ON")["VersionId"]
    assert s3.head_object(Bucket=b, Key="k")["ObjectLockLegalHoldStatus"] == "ON"
    assert s3.get_object_legal_hold(Bucket=b, Key="k", VersionId=v)["LegalHold"]["Status"] == "ON"
    refused(s3.delete_object, Bucket=b, Key="k", VersionId=v, BypassGovernanceRetention=True)
    s3.put_object_legal_hold(Bucket=b, Key="k", VersionId=v, LegalHold={"Status": "OFF"})
    assert s3.get_object_legal_hold(Bucket=b, Key="k", VersionId=v)["LegalHold"]["Status"] == "OFF"
    w = s3.put_object(Bucket=b, Key="k", Body=b"h2")["VersionId"]
    s3.put_object_legal_hold(Bucket=b, Key="k", VersionId=w, LegalHold={"Status": "ON"})
    refused(s3.delete_object, Bucket=b, Key="k", VersionId=w)
    s3.delete_object(Bucket=b, Key="k", VersionId=v)  # its hold is off
    s3.put_object_legal_hold(Bucket=b, Key="k", VersionId=w, LegalHold={"Status": "OFF"})
    s3.delete_object(Bucket=b, Key="k", VersionId=w)
    s3.delete_bucket(Bucket=b)


@test
def copy_and_multipart_take_their_own_lock():
    b = locked_bucket("copymp")
    s3.put_object(Bucket=b, Key="src", Body=b"s", ObjectLockLegalHoldStatus="ON")
    c = s3.copy_object(Bucket=b, Key="dst", CopySource={"Bucket": b, "Key": "src"})
    h = s3.head_object(Bucket=b, Key="dst")
    assert "ObjectLockLegalHoldStatus" not in h or h["ObjectLockLegalHoldStatus"] == "OFF", h  # not the source's
    s3.delete_object(Bucket=b, Key="dst", VersionId=c["VersionId"])
    c = s3.copy_object(Bucket=b, Key="dst", CopySource={"Bucket": b, "Key": "src"}, ObjectLockMode="GOVERNANCE", ObjectLockRetainUntilDate=later())
    assert s3.head_object(Bucket=b, Key="dst")["ObjectLockMode"] == "GOVERNANCE"
    refused(s3.delete_object, Bucket=b, Key="dst", VersionId=c["VersionId"])
    up = s3.create_multipart_upload(Bucket=b, Key="mp", ObjectLockMode="GOVERNANCE", ObjectLockRetainUntilDate=later())
    p = s3.upload_part(Bucket=b, Key="mp", UploadId=up["UploadId"], PartNumber=1, Body=b"m" * 1024)
    done = s3.complete_multipart_upload(Bucket=b, Key="mp", UploadId=up["UploadId"], MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": p["ETag"]}]})
    assert s3.head_object(Bucket=b, Key="mp")["ObjectLockMode"] == "GOVERNANCE"
    refused(s3.delete_object, Bucket=b, Key="mp", VersionId=done["VersionId"])
    for k in ("dst", "mp"):
        for v in s3.list_object_versions(Bucket=b, Prefix=k).get("Versions", []):
            s3.delete_object(Bucket=b, Key=k, VersionId=v["VersionId"], BypassGovernanceRetention=True)
    for v in s3.list_object_versions(Bucket=b, Prefix="src").get("Versions", []):
        s3.put_object_legal_hold(Bucket=b, Key="src", VersionId=v["VersionId"], LegalHold={"Status": "OFF"})
        s3.delete_object(Bucket=b, Key="src", VersionId=v["VersionId"])
    s3.delete_bucket(Bucket=b)


run("s3_objlock")
