package meta

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/s3permapi"
)

// TestS3Perms: a bucket's policy and ownership and an object's ACL are
// stored, survive a reopen, are bounded, and an ACL change keeps the
// object's value; a bucket created outside S3 takes no policy.
func TestS3Perms(t *testing.T) {
	c := threeNodes(t, nil)
	must[*metaapi.Bucket](t)(c.s.CreateS3Bucket("pol", &s3permapi.CreateBucket{CreateS3Bucket: metaapi.CreateS3Bucket{Owner: "AKIAOWNER"}, Ownership: "ObjectWriter"}))
	policy := []byte(`{"Version":"2012-10-17","Statement":[]}`)
	mustNo(t, c.s.PutBucketPerms("pol", &s3permapi.PutBucket{Policy: &policy}))
	big := bytes.Repeat([]byte("x"), s3permapi.MaxPolicyBytes+1)
	wantErr(t, c.s.PutBucketPerms("pol", &s3permapi.PutBucket{Policy: &big}), metaapi.ErrInvalid, "a policy over 20 KiB")
	wantErr(t, c.s.PutBucketPerms("nosuch", &s3permapi.PutBucket{Policy: &policy}), metaapi.ErrNoSuchBucket, "no such bucket")
	must[*metaapi.Bucket](t)(c.s.CreateBucket("plain"))
	wantErr(t, c.s.PutBucketPerms("plain", &s3permapi.PutBucket{Policy: &policy}), metaapi.ErrInvalid, "a bucket created outside S3")
	v := []byte("value")
	must[*metaapi.KeyInfo](t)(c.s.CommitKey("pol", "k", &metaapi.CommitKey{Size: uint64(len(v)), CRC32C: crc32c.Checksum(v), Inline: v,
		Object: &metaapi.ObjectMeta{ETag: "e", ContentType: "text/plain"}}))
	mustNo(t, c.s.PutObjectACL(&s3permapi.ObjectACL{Bucket: "pol", Key: "k", ACL: "public-read"}))
	wantErr(t, c.s.PutObjectACL(&s3permapi.ObjectACL{Bucket: "pol", Key: "nokey", ACL: "public-read"}), metaapi.ErrNoSuchKey, "no such key")
	wantErr(t, c.s.PutObjectACL(&s3permapi.ObjectACL{Bucket: "pol", Key: "k", ACL: strings.Repeat("g", metaapi.MaxObjectMetaBytes)}), metaapi.ErrInvalid, "an ACL over the metadata bound")

	cfg := c.s.Cfg
	mustNo(t, c.s.Close())
	c.s = open(t, cfg)
	b := must[*s3permapi.Bucket](t)(c.s.BucketPerms("pol"))
	if b.Owner != "AKIAOWNER" || !bytes.Equal(b.Policy, policy) || b.Ownership != "ObjectWriter" {
		t.Fatalf("after reopen: %+v", b)
	}
	ki := must[*metaapi.KeyInfo](t)(c.s.GetKey("pol", "k"))
	if ki.Object == nil || ki.Object.Headers[s3permapi.ObjectACLHeader] != "public-read" || ki.Object.ContentType != "text/plain" || ki.Size != uint64(len(v)) || !bytes.Equal(ki.Inline, v) {
		t.Fatalf("key after reopen: %+v", ki)
	}
	empty := []byte{}
	mustNo(t, c.s.PutBucketPerms("pol", &s3permapi.PutBucket{Policy: &empty}))
	if b := must[*s3permapi.Bucket](t)(c.s.BucketPerms("pol")); len(b.Policy) != 0 || b.Ownership != "ObjectWriter" {
		t.Fatalf("after deleting the policy: %+v", b)
	}
	mustNo(t, c.s.PutObjectACL(&s3permapi.ObjectACL{Bucket: "pol", Key: "k"}))
	if ki := must[*metaapi.KeyInfo](t)(c.s.GetKey("pol", "k")); ki.Object.Headers[s3permapi.ObjectACLHeader] != "" {
		t.Fatalf("ACL after removal: %+v", ki.Object)
	}
}
