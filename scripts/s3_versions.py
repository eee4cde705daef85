"""S3 versioning (issue 35) with boto3 against an S3 endpoint: version IDs
on PUT, CopyObject and CompleteMultipartUpload, GET/HEAD/DELETE by
versionId, delete markers, ListObjectVersions paged by key and version-id
markers (boto3's paginator), the null version of never-versioned and
Suspended buckets, DeleteObjects by version, the tags of a version. Run by scripts/s3-clients.sh
(make test-s3):

    python s3_versions.py ENDPOINT BUCKET-PREFIX

Credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY. Each test
makes its own bucket and empties and deletes it when it passes; the exit
status is 1 when one fails."""
import os
import sys

import boto3
from botocore.config import Config
from s3check import code, run, test

EP, PREFIX = sys.argv[1], sys.argv[2]
s3 = boto3.client("s3", endpoint_url=EP, config=Config(retries={"max_attempts": 1}, s3={"addressing_style": "path"}))


def versioned(name, status="Enabled"):
    b = f"{PREFIX}-{name}"
    s3.create_bucket(Bucket=b)
    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": status})
    return b


def all_versions(b, page=1000):
    """Every version and delete marker, through boto3's paginator, as
    (key, version ID, is marker, is latest). S3 answers versions and
    markers in two lists: put back in listing order, by key, the latest
    first, then newest first (IDs of one length sort by age)."""
    out = []
    for p in s3.get_paginator("list_object_versions").paginate(Bucket=b, PaginationConfig={"PageSize": page}):
        out += [(v["Key"], v["VersionId"], False, v["IsLatest"]) for v in p.get("Versions", [])]
        out += [(m["Key"], m["VersionId"], True, m["IsLatest"]) for m in p.get("DeleteMarkers", [])]
    out.sort(key=lambda e: (e[0], not e[3], "" if e[1] == "null" else "~" + e[1]), reverse=False)
    # within a key after the latest: newest first
    res = []
    for k in dict.fromkeys(e[0] for e in out):
        es = [e for e in out if e[0] == k]
        res += [e for e in es if e[3]] + sorted([e for e in es if not e[3]], key=lambda e: "" if e[1] == "null" else e[1], reverse=True)
    return res


def empty_and_delete(b):
    objs = [{"Key": k, "VersionId": v} for k, v, _, _ in all_versions(b)]
    for i in range(0, len(objs), 1000):
        r = s3.delete_objects(Bucket=b, Delete={"Objects": objs[i:i + 1000]})
        assert not r.get("Errors"), r["Errors"]
    s3.delete_bucket(Bucket=b)


@test
def versions_and_markers():
    b = f"{PREFIX}-basic"
    s3.create_bucket(Bucket=b)
    assert "Status" not in s3.get_bucket_versioning(Bucket=b)
    pre = s3.put_object(Bucket=b, Key="k", Body=b"before versioning")
    assert "VersionId" not in pre, pre
    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
    assert s3.get_bucket_versioning(Bucket=b)["Status"] == "Enabled"
    bodies = [b"one", os.urandom(300_000), b"three"]
    ids = [s3.put_object(Bucket=b, Key="k", Body=x)["VersionId"] for x in bodies]
    assert len(set(ids)) == 3 and "null" not in ids, ids
    for vid, body in zip(ids, bodies):
        g = s3.get_object(Bucket=b, Key="k", VersionId=vid)
        assert g["Body"].read() == body and g["VersionId"] == vid
        assert s3.head_object(Bucket=b, Key="k", VersionId=vid)["ContentLength"] == len(body)
    assert s3.get_object(Bucket=b, Key="k", VersionId="null")["Body"].read() == b"before versioning"
    assert code(s3.get_object, Bucket=b, Key="k", VersionId="0000000000000001") == "NoSuchVersion"
    d = s3.delete_object(Bucket=b, Key="k")
    assert d["DeleteMarker"] and d["VersionId"] not in ids, d
    assert code(s3.get_object, Bucket=b, Key="k") == "NoSuchKey"
    assert s3.list_objects_v2(Bucket=b)["KeyCount"] == 0
    vs = all_versions(b)
    assert vs == [("k", d["VersionId"], True, True), ("k", ids[2], False, False), ("k", ids[1], False, False),
                  ("k", ids[0], False, False), ("k", "null", False, False)], vs
    assert code(s3.delete_bucket, Bucket=b) == "BucketNotEmpty"
    # removing the marker brings the last version back
    s3.delete_object(Bucket=b, Key="k", VersionId=d["VersionId"])
    g = s3.get_object(Bucket=b, Key="k")
    assert g["Body"].read() == b"three" and g["VersionId"] == ids[2]
    empty_and_delete(b)


@test
def listing_pages():
    b = versioned("pages")
    for i in range(12):
        for j in range(3):
            s3.put_object(Bucket=b, Key=f"dir{i % 2}/k{i:02d}", Body=b"%d" % j)
    s3.delete_object(Bucket=b, Key="dir0/k00")
    want = all_versions(b, 1000)
    assert len(want) == 37, len(want)
    for page in (1, 2, 5, 7):
        got = all_versions(b, page)
        assert got == want, (page, got[:5], want[:5])
    # a delimiter rolls keys up; a prefix selects
    r = s3.list_object_versions(Bucket=b, Delimiter="/")
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["dir0/", "dir1/"] and not r.get("Versions"), r
    r = s3.list_object_versions(Bucket=b, Prefix="dir1/")
    assert len(r["Versions"]) == 18 and not r.get("DeleteMarkers"), r
    empty_and_delete(b)


@test
def copy_and_multipart_versions():
    b = versioned("copymp")
    v1 = s3.put_object(Bucket=b, Key="src", Body=b"first")["VersionId"]
    s3.put_object(Bucket=b, Key="src", Body=b"second")
    c = s3.copy_object(Bucket=b, Key="dst", CopySource={"Bucket": b, "Key": "src", "VersionId": v1})
    assert c["CopySourceVersionId"] == v1 and c["VersionId"], c
    assert s3.get_object(Bucket=b, Key="dst")["Body"].read() == b"first"
    mids = []
    for fill in (b"a", b"b"):
        u = s3.create_multipart_upload(Bucket=b, Key="mp")["UploadId"]
        parts = [{"PartNumber": n, "ETag": s3.upload_part(Bucket=b, Key="mp", UploadId=u, PartNumber=n, Body=fill * (5 << 20))["ETag"]}
                 for n in (1, 2)]
        r = s3.complete_multipart_upload(Bucket=b, Key="mp", UploadId=u, MultipartUpload={"Parts": parts})
        mids.append(r["VersionId"])
    assert len(set(mids)) == 2, mids
    first = s3.get_object(Bucket=b, Key="mp", VersionId=mids[0], Range="bytes=0-9")["Body"].read()
    assert first == b"a" * 10, first
    empty_and_delete(b)


@test
def suspended_null_version():
    b = versioned("suspend")
    v1 = s3.put_object(Bucket=b, Key="k", Body=b"kept")["VersionId"]
    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Suspended"})
    assert s3.get_bucket_versioning(Bucket=b)["Status"] == "Suspended"
    for body in (b"n1", b"n2"):  # the null version: S3 answers no version ID
        assert "VersionId" not in s3.put_object(Bucket=b, Key="k", Body=body)
    vs = all_versions(b)
    assert vs == [("k", "null", False, True), ("k", v1, False, False)], vs
    assert s3.get_object(Bucket=b, Key="k", VersionId="null")["Body"].read() == b"n2"
    d = s3.delete_object(Bucket=b, Key="k")  # a null delete marker replaces the null version
    assert d["DeleteMarker"] and d["VersionId"] == "null", d
    assert all_versions(b) == [("k", "null", True, True), ("k", v1, False, False)]
    empty_and_delete(b)


@test
def version_tags():
    """Put/Get/DeleteObjectTagging by VersionId: that version's tags alone,
    an older one's as the current one's (S3)."""
    b = versioned("tags")
    ids = [s3.put_object(Bucket=b, Key="k", Body=body)["VersionId"] for body in (b"1", b"22", b"333")]
    r = s3.put_object_tagging(Bucket=b, Key="k", VersionId=ids[0], Tagging={"TagSet": [{"Key": "old", "Value": "yes"}]})
    assert r["VersionId"] == ids[0], r
    tags = lambda vid: s3.get_object_tagging(Bucket=b, Key="k", VersionId=vid)["TagSet"]
    assert tags(ids[0]) == [{"Key": "old", "Value": "yes"}], tags(ids[0])
    assert tags(ids[2]) == [] and s3.get_object_tagging(Bucket=b, Key="k")["TagSet"] == []
    assert s3.delete_object_tagging(Bucket=b, Key="k", VersionId=ids[0])["VersionId"] == ids[0]
    assert tags(ids[0]) == []
    assert code(lambda: s3.put_object_tagging(Bucket=b, Key="k", VersionId="0000000000000001", Tagging={"TagSet": []})) == "NoSuchVersion"
    empty_and_delete(b)


run("s3_versions")
