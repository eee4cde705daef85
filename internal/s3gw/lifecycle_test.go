package s3gw_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// TestLifecycleConfiguration: aws-sdk-go-v2's Put/Get/DeleteBucketLifecycle
// calls reach Spindle (not versitygw's NotImplemented): the rules are kept
// and answered back, S3's refusals are answered with their codes, a user
// who does not own the bucket is refused, and a deleted configuration is
// NoSuchLifecycleConfiguration.
func TestLifecycleConfiguration(t *testing.T) {
	c, b := root(), "lifecycle"
	mkBucket(t, c, b)
	ctx := testCtx(t)
	_, err := c.GetBucketLifecycleConfiguration(ctx, &s3.GetBucketLifecycleConfigurationInput{Bucket: &b})
	wantCode(t, err, "NoSuchLifecycleConfiguration", "unset")
	conf := &types.BucketLifecycleConfiguration{Rules: []types.LifecycleRule{
		{ID: aws.String("logs"), Status: types.ExpirationStatusEnabled, Filter: &types.LifecycleRuleFilter{Prefix: aws.String("logs/")},
			Expiration: &types.LifecycleExpiration{Days: aws.Int32(30)}},
		{ID: aws.String("old"), Status: types.ExpirationStatusEnabled, Filter: &types.LifecycleRuleFilter{},
			NoncurrentVersionExpiration:    &types.NoncurrentVersionExpiration{NoncurrentDays: aws.Int32(7), NewerNoncurrentVersions: aws.Int32(3)},
			AbortIncompleteMultipartUpload: &types.AbortIncompleteMultipartUpload{DaysAfterInitiation: aws.Int32(2)}},
	}}
	if _, err := c.PutBucketLifecycleConfiguration(ctx, &s3.PutBucketLifecycleConfigurationInput{Bucket: &b, LifecycleConfiguration: conf}); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetBucketLifecycleConfiguration(ctx, &s3.GetBucketLifecycleConfigurationInput{Bucket: &b})
	if err != nil || len(got.Rules) != 2 || aws.ToString(got.Rules[0].Filter.Prefix) != "logs/" || aws.ToInt32(got.Rules[0].Expiration.Days) != 30 ||
		aws.ToInt32(got.Rules[1].NoncurrentVersionExpiration.NewerNoncurrentVersions) != 3 || aws.ToInt32(got.Rules[1].AbortIncompleteMultipartUpload.DaysAfterInitiation) != 2 {
		t.Fatalf("rules %+v, %v", got, err)
	}
	bad := &types.BucketLifecycleConfiguration{Rules: []types.LifecycleRule{{ID: aws.String("x"), Status: types.ExpirationStatusEnabled,
		Filter: &types.LifecycleRuleFilter{}, Expiration: &types.LifecycleExpiration{Days: aws.Int32(0)}}}}
	_, err = c.PutBucketLifecycleConfiguration(ctx, &s3.PutBucketLifecycleConfigurationInput{Bucket: &b, LifecycleConfiguration: bad})
	wantCode(t, err, "InvalidArgument", "Days 0")
	_, err = c.PutBucketLifecycleConfiguration(ctx, &s3.PutBucketLifecycleConfigurationInput{Bucket: aws.String("no-such-bucket-lc"), LifecycleConfiguration: conf})
	wantCode(t, err, "NoSuchBucket", "missing bucket")

	u, err := metaCli.CreateUser(ctx, metaapi.CreateUser{Name: "lc-other"})
	if err != nil {
		t.Fatal(err)
	}
	other := client(u.AccessKey, u.SecretKey)
	_, err = other.PutBucketLifecycleConfiguration(ctx, &s3.PutBucketLifecycleConfigurationInput{Bucket: &b, LifecycleConfiguration: conf})
	wantCode(t, err, "AccessDenied", "another user's put")
	_, err = other.DeleteBucketLifecycle(ctx, &s3.DeleteBucketLifecycleInput{Bucket: &b})
	wantCode(t, err, "AccessDenied", "another user's delete")

	if _, err := c.DeleteBucketLifecycle(ctx, &s3.DeleteBucketLifecycleInput{Bucket: &b}); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetBucketLifecycleConfiguration(ctx, &s3.GetBucketLifecycleConfigurationInput{Bucket: &b})
	wantCode(t, err, "NoSuchLifecycleConfiguration", "deleted")
}
