package s3perm

import (
	"encoding/json"
	"strings"
)

// The meta service's grants (package metaapi/authz) count over S3 too: a
// user given read, write, delete or admin on a bucket (or a key prefix
// of it) with `spindle admin grant user:NAME ...` may do over S3 what the
// grant gives, as natively. ByGrant is that decision; the gateway adds it
// to the identity side (Allowed), so a bucket policy's explicit Deny
// still wins over it. The meta service checks the same grants again on
// the gateway's calls, and decides there what only it can decide at the
// commit: an overwrite needs write and delete.

// Grant actions (metaapi/authz's names).
const (
	GrantRead   = "read"
	GrantWrite  = "write"
	GrantDelete = "delete"
	GrantAdmin  = "admin"
)

// UserGrant is one of a user's grants: actions on the keys its prefix
// covers ("" every key).
type UserGrant struct {
	Prefix  string
	Actions []string
}

// grantNeeds maps the S3 actions a grant other than admin gives to the
// grant action they need (an admin grant gives every action). Reading
// an object or listing needs read; putting one (its parts, its tags),
// aborting or listing an upload's parts needs write (as the meta service
// has it for uploads); deleting needs delete. Object lock's changes
// (s3:PutObjectRetention, s3:PutObjectLegalHold) and
// s3:BypassGovernanceRetention are not here: only an admin grant gives
// them, as the meta service asks the admin right on the bucket for them.
var grantNeeds = map[string]string{
	"s3:GetObject":                  GrantRead,
	"s3:GetObjectVersion":           GrantRead,
	"s3:GetObjectAttributes":        GrantRead,
	"s3:GetObjectVersionAttributes": GrantRead,
	"s3:GetObjectTagging":           GrantRead,
	"s3:GetObjectVersionTagging":    GrantRead,
	"s3:GetObjectRetention":         GrantRead,
	"s3:GetObjectLegalHold":         GrantRead,
	"s3:ListBucket":                 GrantRead,
	"s3:ListBucketVersions":         GrantRead,
	"s3:ListBucketMultipartUploads": GrantRead,
	"s3:PutObject":                  GrantWrite,
	"s3:PutObjectTagging":           GrantWrite,
	"s3:PutObjectVersionTagging":    GrantWrite,
	"s3:DeleteObjectTagging":        GrantWrite,
	"s3:DeleteObjectVersionTagging": GrantWrite,
	"s3:AbortMultipartUpload":       GrantWrite,
	"s3:ListMultipartUploadParts":   GrantWrite,
	"s3:DeleteObject":               GrantDelete,
	"s3:DeleteObjectVersion":        GrantDelete,
}

// ByGrant reports whether grants allow action on target: the key of an
// object action, the listed prefix of a listing (s3:prefix), "" for the
// bucket itself (only a grant on the whole bucket covers it).
func ByGrant(grants []UserGrant, action, target string) bool {
	need, ok := grantNeeds[action]
	for _, g := range grants {
		if !Covers(g.Prefix, target) {
			continue
		}
		for _, a := range g.Actions {
			if a == GrantAdmin || ok && a == need {
				return true
			}
		}
	}
	return false
}

// Covers says a grant on prefix covers key, as the meta service has it
// (internal/meta/authz.Covers): every key when prefix is "", else key
// equal to prefix or below it on a '/' boundary ("logs" covers "logs"
// and "logs/a", not "logs2"; "logs/" covers "logs/a").
func Covers(prefix, key string) bool {
	if prefix == "" {
		return true
	}
	if strings.HasSuffix(prefix, "/") {
		return strings.HasPrefix(key, prefix)
	}
	return key == prefix || strings.HasPrefix(key, prefix+"/")
}

// MayAllow reports whether a bucket's S3 permissions could give the user
// of access ("" anonymous requests) some right on it or its objects: its
// ownership enables ACLs (a bucket or object ACL may grant), or its
// policy (normalized: principals are access keys) has an Allow statement
// naming the user or "*", or naming principals by NotPrincipal. The meta
// service lets the gateway's authorized calls through on such a bucket
// (the gateway decided with the documents); where the grants alone give
// a user rights, it checks them itself. A policy that does not parse
// allows nothing here.
func MayAllow(policy []byte, ownership, access string) bool {
	if ACLsEnabled(ownership) {
		return true
	}
	if len(policy) == 0 {
		return false
	}
	var doc struct {
		Statement json.RawMessage
	}
	if json.Unmarshal(policy, &doc) != nil {
		return false
	}
	type statement struct {
		Effect       string
		Principal    json.RawMessage
		NotPrincipal json.RawMessage
	}
	var stmts []statement
	if json.Unmarshal(doc.Statement, &stmts) != nil {
		var one statement
		if json.Unmarshal(doc.Statement, &one) != nil {
			return false
		}
		stmts = []statement{one}
	}
	for _, st := range stmts {
		if st.Effect != "Allow" {
			continue
		}
		if len(st.NotPrincipal) > 0 || namesPrincipal(st.Principal, access) {
			return true
		}
	}
	return false
}

// namesPrincipal says a Principal element ("*", a string, a list, or
// {"AWS": string or list}) names "*" or access.
func namesPrincipal(p json.RawMessage, access string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(p, &m) == nil {
		return namesPrincipal(m["AWS"], access)
	}
	var list []string
	if json.Unmarshal(p, &list) != nil {
		var one string
		if json.Unmarshal(p, &one) != nil {
			return false
		}
		list = []string{one}
	}
	for _, s := range list {
		if s == "*" || access != "" && s == access {
			return true
		}
	}
	return false
}
