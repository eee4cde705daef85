package s3gw_test

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// The gateway caches a bucket's versioning and object-lock configuration
// (versitygw asks for both on every PUT and DELETE); its own changes
// apply at once: a lock configuration put right after PUTs is answered
// and enforced, and a bucket deleted and made again with object lock is
// answered as locked, not as the bucket it replaced.
//
// Fails with the cache not dropped on PutObjectLockConfiguration (the
// configuration read back is the one cached by the PUT before) or on
// DeleteBucket/CreateBucket (the new bucket answers "no configuration";
// verified 2026-12-07).
func TestBucketConfChangesApplyAtOnce(t *testing.T) {
	c, ctx := root(), testCtx(t)
	b := "confcache"
	put := func(key string) string {
		t.Helper()
		out, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &b, Key: aws.String(key), Body: strings.NewReader("v of " + key)})
		if err != nil {
			t.Fatalf("put %s/%s: %v", b, key, err)
		}
		return aws.ToString(out.VersionId)
	}
	// A bucket without object lock, read by a PUT (cached), deleted and
	// made again with it.
	mkBucket(t, c, b)
	put("a")
	if _, err := c.GetObjectLockConfiguration(ctx, &s3.GetObjectLockConfigurationInput{Bucket: &b}); apiCode(err) != "ObjectLockConfigurationNotFoundError" {
		t.Fatalf("object lock of a bucket without it: %v", err)
	}
	if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &b, Key: aws.String("a")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &b}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &b, ObjectLockEnabledForBucket: aws.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	lc, err := c.GetObjectLockConfiguration(ctx, &s3.GetObjectLockConfigurationInput{Bucket: &b})
	if err != nil || lc.ObjectLockConfiguration == nil || lc.ObjectLockConfiguration.ObjectLockEnabled != types.ObjectLockEnabledEnabled {
		t.Fatalf("object lock of the bucket made again with it: %+v, %v", lc, err)
	}
	if st, err := c.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: &b}); err != nil || st.Status != types.BucketVersioningStatusEnabled {
		t.Fatalf("versioning of a bucket with object lock: %q, %v", st.Status, err)
	}
	// A default retention put after a PUT: answered and applied at once.
	put("b")
	if _, err := c.PutObjectLockConfiguration(ctx, &s3.PutObjectLockConfigurationInput{Bucket: &b,
		ObjectLockConfiguration: &types.ObjectLockConfiguration{ObjectLockEnabled: types.ObjectLockEnabledEnabled,
			Rule: &types.ObjectLockRule{DefaultRetention: &types.DefaultRetention{Mode: types.ObjectLockRetentionModeGovernance, Days: aws.Int32(1)}}}}); err != nil {
		t.Fatal(err)
	}
	lc, err = c.GetObjectLockConfiguration(ctx, &s3.GetObjectLockConfigurationInput{Bucket: &b})
	if err != nil || lc.ObjectLockConfiguration.Rule == nil || lc.ObjectLockConfiguration.Rule.DefaultRetention == nil ||
		lc.ObjectLockConfiguration.Rule.DefaultRetention.Mode != types.ObjectLockRetentionModeGovernance {
		t.Fatalf("object lock after its default retention was put: %+v, %v", lc.ObjectLockConfiguration, err)
	}
	vid := put("c")
	r, err := c.GetObjectRetention(ctx, &s3.GetObjectRetentionInput{Bucket: &b, Key: aws.String("c"), VersionId: &vid})
	if err != nil || r.Retention == nil || r.Retention.Mode != types.ObjectLockRetentionModeGovernance {
		t.Fatalf("retention of a version put after the default: %+v, %v", r, err)
	}
	if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &b, Key: aws.String("c"), VersionId: &vid}); apiCode(err) != "AccessDenied" {
		t.Fatalf("deleting a version under GOVERNANCE retention without the bypass: %v, want AccessDenied", err)
	}
}
