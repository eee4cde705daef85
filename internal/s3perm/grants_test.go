package s3perm

import (
	"errors"
	"strings"
	"testing"

	api "github.com/spindle-store/spindle/internal/metaapi/authz"
)

// TestByGrant: the meta service's grants over S3 — read gets and lists,
// write puts (and its uploads), delete deletes, admin everything, each
// on the keys its prefix covers on '/' boundaries; a bucket-wide action
// needs a grant on the whole bucket.
func TestByGrant(t *testing.T) {
	if GrantRead != api.Read || GrantWrite != api.Write || GrantDelete != api.Delete || GrantAdmin != api.Admin {
		t.Fatal("the grant actions' names differ from metaapi/authz's")
	}
	read := []UserGrant{{Actions: []string{GrantRead}}}
	logsWrite := []UserGrant{{Prefix: "logs", Actions: []string{GrantWrite}}}
	admin := []UserGrant{{Prefix: "", Actions: []string{GrantAdmin}}}
	for i, tc := range []struct {
		g      []UserGrant
		action string
		target string
		want   bool
	}{
		{nil, "s3:GetObject", "k", false},
		{read, "s3:GetObject", "k", true},
		{read, "s3:ListBucket", "", true},
		{read, "s3:PutObject", "k", false},
		{read, "s3:DeleteObject", "k", false},
		{read, "s3:GetObjectAcl", "k", false},
		{read, "s3:PutBucketPolicy", "", false},
		{logsWrite, "s3:PutObject", "logs/a", true},
		{logsWrite, "s3:PutObject", "logs", true},
		{logsWrite, "s3:PutObject", "logs2", false},
		{logsWrite, "s3:AbortMultipartUpload", "logs/a", true},
		{logsWrite, "s3:GetObject", "logs/a", false},
		{[]UserGrant{{Actions: []string{GrantDelete}}}, "s3:DeleteObject", "k", true},
		{[]UserGrant{{Prefix: "logs/", Actions: []string{GrantRead}}}, "s3:ListBucket", "logs/", true},
		{[]UserGrant{{Prefix: "logs/", Actions: []string{GrantRead}}}, "s3:ListBucket", "", false},
		{admin, "s3:PutBucketPolicy", "", true},
		{admin, "s3:DeleteObject", "k", true},
		{[]UserGrant{{Prefix: "p", Actions: []string{GrantAdmin}}}, "s3:PutBucketPolicy", "", false},
	} {
		if got := ByGrant(tc.g, tc.action, tc.target); got != tc.want {
			t.Errorf("case %d: ByGrant(%+v, %s, %q) = %v, want %v", i, tc.g, tc.action, tc.target, got, tc.want)
		}
	}
}

// TestMayAllow: where the meta service lets the gateway's authorized
// calls through — ACLs enabled, or a policy Allow naming the user, "*"
// or by NotPrincipal; never a Deny alone, another user, nothing.
func TestMayAllow(t *testing.T) {
	allowBob := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":["AKIABOB"]},"Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}]}`
	for i, tc := range []struct {
		policy, ownership, access string
		want                      bool
	}{
		{"", OwnerEnforced, "AKIABOB", false},
		{"", ObjectWriter, "AKIABOB", true},
		{"", OwnerPreferred, "", true},
		{allowBob, OwnerEnforced, "AKIABOB", true},
		{allowBob, OwnerEnforced, "AKIACAROL", false},
		{allowBob, OwnerEnforced, "", false},
		{strings.Replace(allowBob, "Allow", "Deny", 1), OwnerEnforced, "AKIABOB", false},
		{`{"Statement":{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}}`, OwnerEnforced, "", true},
		{`{"Statement":[{"Effect":"Allow","Principal":{"AWS":"*"},"Action":"s3:*","Resource":"arn:aws:s3:::b"}]}`, OwnerEnforced, "AKIACAROL", true},
		{`{"Statement":[{"Effect":"Allow","NotPrincipal":{"AWS":"AKIABOB"},"Action":"s3:*","Resource":"arn:aws:s3:::b"}]}`, OwnerEnforced, "AKIACAROL", true},
		{`not json`, OwnerEnforced, "AKIABOB", false},
	} {
		if got := MayAllow([]byte(tc.policy), tc.ownership, tc.access); got != tc.want {
			t.Errorf("case %d: MayAllow(%s, %s, %q) = %v, want %v", i, tc.policy, tc.ownership, tc.access, got, tc.want)
		}
	}
}

// TestAccessControlPolicyXML: GetObjectAcl's document, as S3 writes it
// (xsi:type grantees, group URIs), reads back with its grants.
func TestAccessControlPolicyXML(t *testing.T) {
	in := []Grant{{Type: GranteeUser, ID: "AKIABOB", Permission: PermWriteACP}, {Type: GranteeAllUsers, Permission: PermRead},
		{Type: GranteeAuthenticated, Permission: PermRead}}
	doc := AccessControlPolicyXML("AKIA<OWNER>", in)
	for _, want := range []string{`<?xml`, `<AccessControlPolicy xmlns="http://s3.amazonaws.com/doc/2006-03-01/">`, `<Owner><ID>AKIA&lt;OWNER&gt;</ID>`,
		`xsi:type="CanonicalUser"><ID>AKIA&lt;OWNER&gt;</ID><DisplayName>AKIA&lt;OWNER&gt;</DisplayName></Grantee><Permission>FULL_CONTROL</Permission>`,
		`xsi:type="Group"><URI>` + AllUsersURI + `</URI></Grantee><Permission>READ</Permission>`} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("document lacks %s:\n%s", want, doc)
		}
	}
	owner, back, err := ParseAccessControlPolicy(doc)
	if err != nil || owner != "AKIA<OWNER>" || len(back) != len(in) {
		t.Fatalf("read back: %q %+v %v", owner, back, err)
	}
	for i := range in {
		if back[i] != in[i] {
			t.Errorf("grant %d: %+v, want %+v", i, back[i], in[i])
		}
	}
}

// TestParseGrantHeaders: x-amz-grant-* headers as S3 clients write them.
func TestParseGrantHeaders(t *testing.T) {
	h := map[string]string{
		"X-Amz-Grant-Read":         `id="AKIABOB", uri="` + AllUsersURI + `"`,
		"X-Amz-Grant-Full-Control": `id=AKIACAROL`,
		"X-Amz-Grant-Write-Acp":    ` uri="` + AuthenticatedUsersURI + `" `,
	}
	g, err := ParseGrantHeaders(func(k string) string { return h[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := []Grant{{Type: GranteeUser, ID: "AKIABOB", Permission: PermRead}, {Type: GranteeAllUsers, Permission: PermRead},
		{Type: GranteeAuthenticated, Permission: PermWriteACP}, {Type: GranteeUser, ID: "AKIACAROL", Permission: PermFullControl}}
	if len(g) != len(want) {
		t.Fatalf("grants %+v, want %+v", g, want)
	}
	for i := range want {
		if g[i] != want[i] {
			t.Errorf("grant %d: %+v, want %+v", i, g[i], want[i])
		}
	}
	if g, err := ParseGrantHeaders(func(string) string { return "" }); g != nil || err != nil {
		t.Errorf("no headers: %+v %v", g, err)
	}
	for _, bad := range []string{`emailAddress="a@b.c"`, `uri="http://acs.amazonaws.com/groups/s3/LogDelivery"`, `AKIABOB`, `id=""`} {
		if _, err := ParseGrantHeaders(func(k string) string {
			if k == "X-Amz-Grant-Read" {
				return bad
			}
			return ""
		}); !errors.Is(err, ErrGrantee) {
			t.Errorf("%s: %v, want ErrGrantee", bad, err)
		}
	}
}

// TestByGrantObjectLock: changing a version's lock and bypassing a
// GOVERNANCE retention take an admin grant; write and delete grants do not
// give them (reading the lock takes read).
func TestByGrantObjectLock(t *testing.T) {
	rw := []UserGrant{{Actions: []string{GrantRead, GrantWrite, GrantDelete}}}
	admin := []UserGrant{{Actions: []string{GrantAdmin}}}
	for _, a := range []string{"s3:BypassGovernanceRetention", "s3:PutObjectRetention", "s3:PutObjectLegalHold"} {
		if ByGrant(rw, a, "k") {
			t.Errorf("read, write and delete grants give %s", a)
		}
		if !ByGrant(admin, a, "k") {
			t.Errorf("an admin grant does not give %s", a)
		}
	}
	if !ByGrant(rw, "s3:GetObjectRetention", "k") || !ByGrant(rw, "s3:DeleteObjectVersion", "k") {
		t.Error("read or delete grant refused a lock read or a version delete")
	}
}
