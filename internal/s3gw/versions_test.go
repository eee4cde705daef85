package s3gw_test

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// TestVersioning drives S3 versioning through the AWS SDK: version IDs
// on writes, reads and copies by version (inline values and values in
// blocks), delete markers, ListObjectVersions paged by key and version
// markers, removal of versions bringing the previous one back, the null
// version of a Suspended bucket, DeleteObjects by version.
func TestVersioning(t *testing.T) {
	c, b := root(), "versioned"
	mkBucket(t, c, b)
	ctx := testCtx(t)
	put := func(key string, body []byte) string {
		t.Helper()
		out, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &b, Key: &key, Body: bytes.NewReader(body)})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(out.VersionId)
	}
	get := func(key, vid string) ([]byte, *s3.GetObjectOutput, error) {
		t.Helper()
		in := &s3.GetObjectInput{Bucket: &b, Key: &key}
		if vid != "" {
			in.VersionId = &vid
		}
		out, err := c.GetObject(ctx, in)
		if err != nil {
			return nil, nil, err
		}
		defer closeT(t, out.Body)
		data, err := io.ReadAll(out.Body)
		return data, out, err
	}
	if v := put("pre", []byte("before")); v != "" {
		t.Fatalf("a PUT in a bucket never versioned answered version %q", v)
	}
	st, err := c.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: &b})
	if err != nil || st.Status != "" {
		t.Fatalf("versioning of a new bucket: %q, %v", st.Status, err)
	}
	if _, err := c.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: &b,
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}}); err != nil {
		t.Fatal(err)
	}
	if st, err = c.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: &b}); err != nil || st.Status != types.BucketVersioningStatusEnabled {
		t.Fatalf("versioning %q, %v", st.Status, err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 20<<10) // 320 KiB: in blocks, not inline
	bodies := [][]byte{[]byte("one"), big, []byte("three")}
	var ids []string
	for _, body := range bodies {
		ids = append(ids, put("k", body))
	}
	if ids[0] == "" || ids[0] == ids[1] || ids[1] == ids[2] {
		t.Fatalf("version IDs %q", ids)
	}
	for i, id := range ids {
		data, out, err := get("k", id)
		if err != nil || !bytes.Equal(data, bodies[i]) || aws.ToString(out.VersionId) != id {
			t.Fatalf("GET version %d (%s): %d bytes, version %q, %v", i, id, len(data), aws.ToString(out.VersionId), err)
		}
	}
	h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b, Key: aws.String("k"), VersionId: &ids[1]})
	if err != nil || aws.ToInt64(h.ContentLength) != int64(len(big)) || aws.ToString(h.VersionId) != ids[1] {
		t.Fatalf("HEAD version 1: %+v, %v", h, err)
	}
	if _, _, err := get("k", "0000000000000001"); err == nil {
		t.Fatal("GET of a version that does not exist succeeded")
	} else {
		wantCode(t, err, "NoSuchVersion", "GET a missing version")
	}
	cp, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &b, Key: aws.String("copy"), CopySource: aws.String(b + "/k?versionId=" + ids[1])})
	if err != nil || aws.ToString(cp.CopySourceVersionId) != ids[1] || aws.ToString(cp.VersionId) == "" {
		t.Fatalf("copy of version 1: %+v, %v", cp, err)
	}
	if data, _, err := get("copy", ""); err != nil || !bytes.Equal(data, big) {
		t.Fatalf("the copy of version 1: %d bytes, %v", len(data), err)
	}

	// A delete makes a marker; the key is gone, its versions are not.
	del, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &b, Key: aws.String("k")})
	if err != nil || !aws.ToBool(del.DeleteMarker) || aws.ToString(del.VersionId) == "" {
		t.Fatalf("delete: %+v, %v", del, err)
	}
	marker := aws.ToString(del.VersionId)
	if _, _, err := get("k", ""); err == nil {
		t.Fatal("GET after a delete marker succeeded")
	}
	if data, _, err := get("k", ids[2]); err != nil || string(data) != "three" {
		t.Fatalf("GET of the last version under the marker: %q, %v", data, err)
	}
	_, err = c.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: &b, Key: aws.String("k"), VersionId: &marker, Tagging: tagSet(map[string]string{"a": "b"})})
	wantCode(t, err, "MethodNotAllowed", "tag a delete marker")
	_, err = c.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: &b, Key: aws.String("k"), VersionId: &marker})
	wantCode(t, err, "MethodNotAllowed", "tags of a delete marker")
	l, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &b})
	if err != nil || len(l.Contents) != 2 { // pre, copy
		t.Fatalf("ListObjectsV2 after the marker: %d keys, %v", len(l.Contents), err)
	}
	want := []string{"copy@" + aws.ToString(cp.VersionId) + "*", "k@" + marker + "(marker)*", "k@" + ids[2], "k@" + ids[1], "k@" + ids[0], "pre@null*"}
	for _, page := range []int32{1, 2, 3, 1000} {
		if got := listVersions(t, c, b, page); !slices.Equal(got, want) {
			t.Fatalf("versions in pages of %d:\n%v\nwant\n%v", page, got, want)
		}
	}
	_, err = c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &b})
	wantCode(t, err, "BucketNotEmpty", "delete a bucket with versions")

	// Removing the marker brings version 2 back; removing version 2
	// brings version 1.
	for _, v := range []string{marker, ids[2]} {
		if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &b, Key: aws.String("k"), VersionId: aws.String(v)}); err != nil {
			t.Fatal(err)
		}
	}
	if data, out, err := get("k", ""); err != nil || !bytes.Equal(data, big) || aws.ToString(out.VersionId) != ids[1] {
		t.Fatalf("current version after removing two: %d bytes, %v", len(data), err)
	}

	// Suspended: writes make the null version, replacing it.
	if _, err := c.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: &b,
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusSuspended}}); err != nil {
		t.Fatal(err)
	}
	if v := put("pre", []byte("after")); v != "" {
		t.Fatalf("suspended PUT answered version %q, want none (the null version: S3 leaves the header out)", v)
	}
	if data, _, err := get("pre", "null"); err != nil || string(data) != "after" {
		t.Fatalf("null version: %q, %v", data, err)
	}

	// DeleteObjects by version empties the bucket.
	var objs []types.ObjectIdentifier
	vl, err := c.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: &b})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vl.Versions {
		objs = append(objs, types.ObjectIdentifier{Key: v.Key, VersionId: v.VersionId})
	}
	for _, m := range vl.DeleteMarkers {
		objs = append(objs, types.ObjectIdentifier{Key: m.Key, VersionId: m.VersionId})
	}
	dr, err := c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &b, Delete: &types.Delete{Objects: objs}})
	if err != nil || len(dr.Errors) > 0 || len(dr.Deleted) != len(objs) {
		t.Fatalf("DeleteObjects of %d versions: %d deleted, errors %+v, %v", len(objs), len(dr.Deleted), dr.Errors, err)
	}
	if _, err := c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &b}); err != nil {
		t.Fatal(err)
	}
}

// listVersions lists every version of bucket in pages of page, as
// key@version, "(marker)" for a delete marker, "*" for the latest.
func listVersions(t *testing.T, c *s3.Client, bucket string, page int32) []string {
	t.Helper()
	var out []string
	in := &s3.ListObjectVersionsInput{Bucket: &bucket, MaxKeys: &page}
	for range 1000 {
		l, err := c.ListObjectVersions(testCtx(t), in)
		if err != nil {
			t.Fatal(err)
		}
		type entry struct {
			key, id  string
			marker   bool
			latest   bool
			sequence int
		}
		var es []entry
		for _, v := range l.Versions {
			es = append(es, entry{aws.ToString(v.Key), aws.ToString(v.VersionId), false, aws.ToBool(v.IsLatest), 0})
		}
		for _, m := range l.DeleteMarkers {
			es = append(es, entry{aws.ToString(m.Key), aws.ToString(m.VersionId), true, aws.ToBool(m.IsLatest), 0})
		}
		// S3 returns versions and markers in separate lists: order them
		// by key, then newest first (IDs of one length sort by age; null
		// is the oldest here).
		slices.SortFunc(es, func(a, b entry) int {
			if a.key != b.key {
				return strings.Compare(a.key, b.key)
			}
			return -strings.Compare(strings.Replace(a.id, "null", "", 1), strings.Replace(b.id, "null", "", 1))
		})
		for _, e := range es {
			s := e.key + "@" + e.id
			if e.marker {
				s += "(marker)"
			}
			if e.latest {
				s += "*"
			}
			out = append(out, s)
		}
		if !aws.ToBool(l.IsTruncated) {
			return out
		}
		in.KeyMarker, in.VersionIdMarker = l.NextKeyMarker, l.NextVersionIdMarker
	}
	t.Fatal("listing does not end")
	return nil
}

// TestVersionTagging: Put/Get/DeleteObjectTagging with a versionId change
// and read that version's tags alone, current or not (S3's behaviour,
// versitygw's Versioning_PutGetDeleteObjectTagging_success); a missing
// version is NoSuchVersion, and the answer names the version.
func TestVersionTagging(t *testing.T) {
	c, b := root(), "vertags"
	mkBucket(t, c, b)
	ctx := testCtx(t)
	if _, err := c.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: &b,
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 3 {
		out, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &b, Key: aws.String("k"), Body: strings.NewReader(strings.Repeat("x", i+1))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, aws.ToString(out.VersionId))
	}
	tags := func(vid string) map[string]string {
		t.Helper()
		out, err := c.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: &b, Key: aws.String("k"), VersionId: aws.String(vid)})
		if err != nil || aws.ToString(out.VersionId) != vid {
			t.Fatalf("tags of version %s: %+v, %v", vid, out, err)
		}
		return tagMap(out.TagSet)
	}
	for _, vid := range []string{ids[1], ids[2]} { // an older version, then the current one by its ID
		put, err := c.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: &b, Key: aws.String("k"), VersionId: aws.String(vid),
			Tagging: tagSet(map[string]string{"v": vid})})
		if err != nil || aws.ToString(put.VersionId) != vid {
			t.Fatalf("tag version %s: %+v, %v", vid, put, err)
		}
	}
	for i, want := range []string{"", ids[1], ids[2]} {
		if got := tags(ids[i]); got["v"] != want || len(got) != min(len(want), 1) {
			t.Fatalf("tags of version %d: %v, want v=%q", i, got, want)
		}
	}
	del, err := c.DeleteObjectTagging(ctx, &s3.DeleteObjectTaggingInput{Bucket: &b, Key: aws.String("k"), VersionId: aws.String(ids[1])})
	if err != nil || aws.ToString(del.VersionId) != ids[1] {
		t.Fatalf("delete the tags of version 1: %+v, %v", del, err)
	}
	if got := tags(ids[1]); len(got) != 0 {
		t.Fatalf("tags of version 1 after their delete: %v", got)
	}
	if got := tags(ids[2]); got["v"] != ids[2] {
		t.Fatalf("the current version's tags after version 1's delete: %v", got)
	}
	if data := get(t, c, b, "k", ""); len(data) != 3 {
		t.Fatalf("the current version after tagging: %d bytes", len(data))
	}
	_, err = c.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: &b, Key: aws.String("k"), VersionId: aws.String("0000000000000001"),
		Tagging: tagSet(map[string]string{"a": "b"})})
	wantCode(t, err, "NoSuchVersion", "tag a missing version")
	_, err = c.DeleteObjectTagging(ctx, &s3.DeleteObjectTaggingInput{Bucket: &b, Key: aws.String("k"), VersionId: aws.String("0000000000000001")})
	wantCode(t, err, "NoSuchVersion", "delete the tags of a missing version")
}
