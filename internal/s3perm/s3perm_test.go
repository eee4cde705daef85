package s3perm

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestUserOf(t *testing.T) {
	for p, want := range map[string]string{
		"AKIAALICE":                                 "AKIAALICE",
		"arn:aws:iam::123456789012:user/alice":      "alice",
		"arn:aws:iam::spindle:user/AKIAALICE":       "AKIAALICE",
		"*":                                         "",
		"arn:aws:iam::123456789012:root":            "",
		"arn:aws:iam::123456789012:role/admin":      "",
		"arn:aws:iam::123456789012:user/a/b":        "",
		"arn:aws:s3:::bucket":                       "",
		"arn:aws:iam:us-east-1:123456789012:user/x": "",
	} {
		got, ok := UserOf(p)
		if got != want || ok != (want != "") {
			t.Errorf("UserOf(%q) = %q %v, want %q", p, got, ok, want)
		}
	}
}

func TestNormalizePolicy(t *testing.T) {
	users := map[string]string{"alice": "AKIAALICE", "AKIAALICE": "AKIAALICE", "bob": "AKIABOB"}
	resolve := func(n string) (string, bool) { a, ok := users[n]; return a, ok }
	doc := `{"Version":"2012-10-17","Statement":[
		{"Sid":"a","Effect":"Deny","Principal":{"AWS":["arn:aws:iam::123456789012:user/bob"]},"Action":"s3:PutObject","Resource":"arn:aws:s3:::b/*"},
		{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::1:user/alice"},"Action":["s3:Get*"],"Resource":"arn:aws:s3:::b/*"},
		{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/pub/*","Condition":{"IpAddress":{"aws:SourceIp":"127.0.0.0/8"}}},
		{"Effect":"Deny","NotPrincipal":{"AWS":"AKIAALICE"},"Action":"s3:DeleteObject","Resource":"arn:aws:s3:::b/*"}]}`
	out, err := NormalizePolicy([]byte(doc), resolve)
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Version   string
		Statement []struct {
			Sid          string
			Principal    json.RawMessage
			NotPrincipal json.RawMessage
			Condition    json.RawMessage
		}
	}
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatal(err)
	}
	if p.Version != "2012-10-17" || len(p.Statement) != 4 || p.Statement[0].Sid != "a" {
		t.Fatalf("normalized: %s", out)
	}
	for i, want := range []string{`{"AWS":["AKIABOB"]}`, `{"AWS":"AKIAALICE"}`, `"*"`} {
		if string(p.Statement[i].Principal) != want {
			t.Errorf("statement %d: principal %s, want %s", i, p.Statement[i].Principal, want)
		}
	}
	if string(p.Statement[3].NotPrincipal) != `{"AWS":"AKIAALICE"}` || !strings.Contains(string(p.Statement[2].Condition), "127.0.0.0/8") {
		t.Errorf("normalized: %s", out)
	}
	for _, bad := range []string{
		`{"Statement":[{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::1:user/mallory"},"Action":"s3:*","Resource":"arn:aws:s3:::b"}]}`,
		`{"Statement":[{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::1:role/r"},"Action":"s3:*","Resource":"arn:aws:s3:::b"}]}`,
	} {
		if _, err := NormalizePolicy([]byte(bad), resolve); !errors.Is(err, ErrPrincipal) {
			t.Errorf("%s: %v, want ErrPrincipal", bad, err)
		}
	}
	if _, err := NormalizePolicy([]byte(`{"Statement":[],"x":"`+strings.Repeat("y", MaxPolicyBytes)+`"}`), resolve); err == nil {
		t.Error("a policy over 20 KiB accepted")
	}
}

func TestCannedGrants(t *testing.T) {
	for _, tc := range []struct {
		canned, ownership string
		read              bool // anonymous READ
		authRead          bool // any user's READ
		err               error
	}{
		{"private", OwnerEnforced, false, false, nil},
		{"bucket-owner-full-control", OwnerEnforced, false, false, nil},
		{"public-read", OwnerEnforced, false, false, ErrACLsDisabled},
		{"authenticated-read", OwnerEnforced, false, false, ErrACLsDisabled},
		{"public-read", ObjectWriter, true, true, nil},
		{"public-read-write", OwnerPreferred, true, true, nil},
		{"authenticated-read", ObjectWriter, false, true, nil},
		{"private", ObjectWriter, false, false, nil},
		{"aws-exec-read", ObjectWriter, false, false, ErrCanned},
	} {
		g, err := CannedGrants(tc.canned, tc.ownership)
		if !errors.Is(err, tc.err) {
			t.Errorf("%s under %s: %v, want %v", tc.canned, tc.ownership, err, tc.err)
			continue
		}
		back, derr := DecodeGrants(EncodeGrants(g))
		if derr != nil {
			t.Fatal(derr)
		}
		if Allows(back, "", PermRead) != tc.read || Allows(back, "AKIAANY", PermRead) != tc.authRead {
			t.Errorf("%s under %s: grants %+v", tc.canned, tc.ownership, back)
		}
		if Allows(back, "AKIAANY", PermWrite) != (tc.canned == "public-read-write") {
			t.Errorf("%s: WRITE %v", tc.canned, Allows(back, "AKIAANY", PermWrite))
		}
	}
}

func TestParseAccessControlPolicy(t *testing.T) {
	body := `<AccessControlPolicy xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Owner><ID>AKIAOWNER</ID></Owner><AccessControlList>
<Grant><Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:type="CanonicalUser"><ID>AKIAOWNER</ID></Grantee><Permission>FULL_CONTROL</Permission></Grant>
<Grant><Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:type="Group"><URI>http://acs.amazonaws.com/groups/global/AllUsers</URI></Grantee><Permission>READ</Permission></Grant>
<Grant><Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:type="CanonicalUser"><ID>AKIABOB</ID></Grantee><Permission>WRITE_ACP</Permission></Grant>
</AccessControlList></AccessControlPolicy>`
	owner, g, err := ParseAccessControlPolicy([]byte(body))
	if err != nil || owner != "AKIAOWNER" || len(g) != 2 {
		t.Fatalf("%q %+v %v", owner, g, err)
	}
	if !Allows(g, "", PermRead) || !Allows(g, "AKIABOB", PermWriteACP) || Allows(g, "AKIACAROL", PermWriteACP) {
		t.Fatalf("grants %+v", g)
	}
	for _, bad := range []string{
		strings.Replace(body, "<Permission>READ</Permission>", "<Permission>EVERYTHING</Permission>", 1),
		strings.Replace(body, "AllUsers</URI>", "LogDelivery</URI>", 1),
		"<AccessControlPolicy",
	} {
		if _, _, err := ParseAccessControlPolicy([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

// TestAllowed: the identity side of AWS's evaluation (the bucket policy's
// explicit Deny and Allow are versitygw's, tested through the gateway in
// internal/s3gw): the owner may do everything; others only what a grant
// gives, and grants count only where ownership enables ACLs.
func TestAllowed(t *testing.T) {
	pub := []Grant{{Type: GranteeAllUsers, Permission: PermRead}}
	bobWrite := []Grant{{Type: GranteeUser, ID: "AKIABOB", Permission: PermWrite}}
	authRead := []Grant{{Type: GranteeAuthenticated, Permission: PermRead}}
	for i, tc := range []struct {
		r    Request
		want bool
	}{
		{Request{Access: "AKIAOWNER", Action: "s3:PutObject", Object: true, Owner: "AKIAOWNER", Ownership: OwnerEnforced}, true},
		{Request{Access: "AKIAOWNER", Action: "s3:PutBucketPolicy", Owner: "AKIAOWNER", Ownership: OwnerEnforced}, true},
		{Request{Access: "", Action: "s3:GetObject", Object: true, Owner: "", Ownership: ObjectWriter}, false}, // anonymous is never the owner
		{Request{Access: "AKIABOB", Action: "s3:GetObject", Object: true, Owner: "AKIAOWNER", Ownership: OwnerEnforced, ObjectGrants: pub}, false},
		{Request{Access: "AKIABOB", Action: "s3:GetObject", Object: true, Owner: "AKIAOWNER", Ownership: ObjectWriter, ObjectGrants: pub}, true},
		{Request{Access: "", Action: "s3:GetObject", Object: true, Owner: "AKIAOWNER", Ownership: ObjectWriter, ObjectGrants: authRead}, false},
		{Request{Access: "AKIABOB", Action: "s3:GetObject", Object: true, Owner: "AKIAOWNER", Ownership: ObjectWriter, ObjectGrants: authRead}, true},
		{Request{Access: "AKIABOB", Action: "s3:PutObject", Object: true, Owner: "AKIAOWNER", Ownership: ObjectWriter, ObjectGrants: pub}, false},
		{Request{Access: "AKIABOB", Action: "s3:PutObject", Object: true, Owner: "AKIAOWNER", Ownership: ObjectWriter, BucketGrants: bobWrite}, true},
		{Request{Access: "AKIACAROL", Action: "s3:PutObject", Object: true, Owner: "AKIAOWNER", Ownership: ObjectWriter, BucketGrants: bobWrite}, false},
		{Request{Access: "AKIABOB", Action: "s3:DeleteBucket", Owner: "AKIAOWNER", Ownership: ObjectWriter, BucketGrants: []Grant{{Type: GranteeUser, ID: "AKIABOB", Permission: PermFullControl}}}, false},
		{Request{Access: "AKIABOB", Action: "s3:GetObject", Object: true, Owner: "AKIAOWNER", Ownership: ObjectWriter, BucketGrants: authRead}, false}, // a bucket READ lists, it does not read objects
		{Request{Access: "AKIABOB", Action: "s3:ListBucket", Owner: "AKIAOWNER", Ownership: ObjectWriter, BucketGrants: authRead}, true},
	} {
		if got := Allowed(tc.r); got != tc.want {
			t.Errorf("case %d %+v: %v, want %v", i, tc.r, got, tc.want)
		}
	}
}
