package s3gw_test

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/s3perm"
)

// TestACLDocuments: GetObjectAcl and GetBucketAcl answer S3's
// AccessControlPolicy document (an SDK reads its typed grantees, groups
// by URI), for ACLs set canned and by x-amz-grant-* headers, on objects
// and on the bucket; an unsupported grantee is InvalidArgument.
func TestACLDocuments(t *testing.T) {
	ctx := testCtx(t)
	c := root()
	b := "acl-documents"
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(b), ObjectOwnership: types.ObjectOwnershipObjectWriter}); err != nil {
		t.Fatal(err)
	}
	grantsOf := func(gs []types.Grant) map[string]bool {
		m := map[string]bool{}
		for _, g := range gs {
			who := aws.ToString(g.Grantee.ID) + aws.ToString(g.Grantee.URI)
			m[string(g.Grantee.Type)+" "+who+" "+string(g.Permission)] = true
		}
		return m
	}
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(b), Key: aws.String("k"), Body: strings.NewReader("v"),
		GrantRead: aws.String(`uri="` + s3perm.AuthenticatedUsersURI + `"`)}); err != nil {
		t.Fatal(err)
	}
	acl, err := c.GetObjectAcl(ctx, &s3.GetObjectAclInput{Bucket: aws.String(b), Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	owner := aws.ToString(acl.Owner.ID)
	got := grantsOf(acl.Grants)
	if owner == "" || len(got) != 2 || !got["CanonicalUser "+owner+" FULL_CONTROL"] || !got["Group "+s3perm.AuthenticatedUsersURI+" READ"] {
		t.Fatalf("object ACL: owner %q, grants %v", owner, got)
	}
	if _, err := c.PutObjectAcl(ctx, &s3.PutObjectAclInput{Bucket: aws.String(b), Key: aws.String("k"), ACL: types.ObjectCannedACLPublicRead}); err != nil {
		t.Fatal(err)
	}
	if acl, err = c.GetObjectAcl(ctx, &s3.GetObjectAclInput{Bucket: aws.String(b), Key: aws.String("k")}); err != nil {
		t.Fatal(err)
	}
	if got := grantsOf(acl.Grants); len(got) != 2 || !got["Group "+s3perm.AllUsersURI+" READ"] {
		t.Fatalf("object ACL after public-read: %v", got)
	}
	u, err := metaCli.CreateUser(ctx, metaapi.CreateUser{Name: "acl-grantee"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String(b), GrantRead: aws.String(`uri="` + s3perm.AllUsersURI + `"`),
		GrantWriteACP: aws.String(`id="` + u.AccessKey + `"`)}); err != nil {
		t.Fatal(err)
	}
	bacl, err := c.GetBucketAcl(ctx, &s3.GetBucketAclInput{Bucket: aws.String(b)})
	if err != nil {
		t.Fatal(err)
	}
	if got := grantsOf(bacl.Grants); aws.ToString(bacl.Owner.ID) != owner || len(got) != 3 || !got["Group "+s3perm.AllUsersURI+" READ"] ||
		!got["CanonicalUser "+owner+" FULL_CONTROL"] || !got["CanonicalUser "+u.AccessKey+" WRITE_ACP"] {
		t.Fatalf("bucket ACL: owner %q, grants %v", aws.ToString(bacl.Owner.ID), got)
	}
	for what, in := range map[string]*s3.PutObjectAclInput{
		"an email grantee": {GrantRead: aws.String(`emailAddress="a@example.com"`)},
		"an unknown user":  {GrantRead: aws.String(`id="AKIANOSUCHUSER000001"`)},
	} {
		in.Bucket, in.Key = aws.String(b), aws.String("k")
		if _, err := c.PutObjectAcl(ctx, in); apiCode(err) != "InvalidArgument" {
			t.Errorf("%s: %v, want InvalidArgument", what, err)
		}
	}
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(b), Key: aws.String("both"), Body: strings.NewReader("v"),
		ACL: types.ObjectCannedACLPublicRead, GrantRead: aws.String(`uri="` + s3perm.AllUsersURI + `"`)})
	if err == nil {
		t.Error("a canned ACL with grant headers accepted")
	}
	// Under BucketOwnerEnforced (the default) grants are refused.
	mkBucket(t, c, "acl-enforced")
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("acl-enforced"), Key: aws.String("k"), Body: strings.NewReader("v"),
		GrantRead: aws.String(`uri="` + s3perm.AllUsersURI + `"`)})
	if code := apiCode(err); code != "AccessControlListNotSupported" {
		t.Errorf("grant headers under BucketOwnerEnforced: %v, want AccessControlListNotSupported", err)
	}
}
