package s3acl

import (
	"encoding/json"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/versity/versitygw/auth"
	"github.com/versity/versitygw/s3err"

	"github.com/spindle-store/spindle/internal/s3perm"
	"github.com/spindle-store/spindle/internal/s3permapi"
)

// PutBucketAcl's header grantees are stored as users and groups, and read
// back as grants; the owner's own FULL_CONTROL is implicit.
func TestNormalizeBucketACL(t *testing.T) {
	in, err := json.Marshal(auth.ACL{Owner: "AKIAOWNER", Grantees: []auth.Grantee{
		{Access: "AKIAOWNER", Permission: auth.PermissionFullControl, Type: types.TypeCanonicalUser},
		{Access: `id="AKIABOB"`, Permission: auth.PermissionRead, Type: types.TypeCanonicalUser},
		{Access: ` uri="` + s3perm.AuthenticatedUsersURI + `"`, Permission: auth.PermissionWrite, Type: types.TypeCanonicalUser},
	}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := NormalizeBucketACL(in)
	if err != nil {
		t.Fatal(err)
	}
	acl, err := auth.ParseACL(out)
	if err != nil {
		t.Fatal(err)
	}
	got := BucketGrants(acl, "AKIAOWNER")
	want := []s3perm.Grant{{Type: s3perm.GranteeUser, ID: "AKIABOB", Permission: s3perm.PermRead}, {Type: s3perm.GranteeAuthenticated, Permission: s3perm.PermWrite}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("grants %+v, want %+v", got, want)
	}
	bad, _ := json.Marshal(auth.ACL{Owner: "o", Grantees: []auth.Grantee{{Access: `emailAddress="a@b.c"`, Permission: auth.PermissionRead}}})
	if _, err := NormalizeBucketACL(bad); err == nil {
		t.Fatal("an email grantee accepted")
	}
}

// PutObjectAcl: one of canned, headers, body; headers name known users,
// need ACLs enabled, and exclude a canned ACL.
func TestForPutObjectAcl(t *testing.T) {
	known := func(a string) (bool, error) { return a == "AKIABOB", nil }
	writer := &s3permapi.Bucket{Owner: "AKIAOWNER", Ownership: s3perm.ObjectWriter}
	str := func(s string) *string { return &s }
	g, err := ForPutObjectAcl(&s3.PutObjectAclInput{GrantRead: str(`id="AKIABOB"`)}, nil, writer, known)
	if err != nil || len(g) != 1 || g[0] != (s3perm.Grant{Type: s3perm.GranteeUser, ID: "AKIABOB", Permission: s3perm.PermRead}) {
		t.Fatalf("header grant: %+v %v", g, err)
	}
	code := func(err error) string {
		if ae, ok := err.(s3err.APIError); ok {
			return ae.Code
		}
		return "?"
	}
	for what, tc := range map[string]struct {
		in   *s3.PutObjectAclInput
		body string
		bk   *s3permapi.Bucket
		want string
	}{
		"unknown user":       {&s3.PutObjectAclInput{GrantRead: str(`id="AKIAEVE"`)}, "", writer, "InvalidArgument"},
		"canned and headers": {&s3.PutObjectAclInput{ACL: types.ObjectCannedACLPublicRead, GrantRead: str(`id="AKIABOB"`)}, "", writer, "InvalidRequest"},
		"headers and body":   {&s3.PutObjectAclInput{GrantRead: str(`id="AKIABOB"`)}, "<AccessControlPolicy/>", writer, "UnexpectedContent"},
		"ACLs disabled":      {&s3.PutObjectAclInput{GrantRead: str(`id="AKIABOB"`)}, "", &s3permapi.Bucket{Owner: "AKIAOWNER", Ownership: s3perm.OwnerEnforced}, "AccessControlListNotSupported"},
	} {
		if _, err := ForPutObjectAcl(tc.in, []byte(tc.body), tc.bk, known); code(err) != tc.want {
			t.Errorf("%s: %v, want %s", what, err, tc.want)
		}
	}
}

// A grant covers an object by its key, a listing by its prefix, anything
// else as the whole bucket.
func TestGrantTarget(t *testing.T) {
	cond := map[string][]string{"s3:prefix": {"logs/"}}
	if GrantTarget(auth.GetObjectAction, "k", cond) != "k" || GrantTarget(auth.ListBucketAction, "", cond) != "logs/" ||
		GrantTarget(auth.PutBucketPolicyAction, "", cond) != "" || GrantTarget(auth.ListBucketAction, "", nil) != "" {
		t.Fatal("grant targets")
	}
	bk := &s3permapi.Bucket{Grants: []s3permapi.UserGrant{{Access: "A", Actions: []string{"read"}}, {Access: "B", Prefix: "p", Actions: []string{"write"}}}}
	if g := UserGrants(bk, "B"); len(g) != 1 || g[0].Prefix != "p" || len(UserGrants(bk, "C")) != 0 {
		t.Fatalf("user grants %+v", g)
	}
}
