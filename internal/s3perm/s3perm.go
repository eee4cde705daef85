// Package s3perm is the S3 gateway's part of S3 permissions that
// versitygw (which evaluates bucket policies and bucket ACLs) does not
// have: how Spindle names its users in a policy, object ACLs, and the
// bucket owner's own rights. It is pure: no I/O, no state; every function
// is safe for concurrent use.
//
// Evaluation (AWS's logic, internal/s3gw wires it): a request is allowed
// when no statement of the bucket policy that applies to it denies it
// (an explicit Deny wins over everything), and something allows it: a
// statement of the bucket policy (versitygw evaluates it: Effect,
// Principal, Action and Resource with wildcards, the conditions), the
// bucket ACL (versitygw), or Allowed here (the bucket owner has every
// right on its bucket and objects; an ACL grant of the bucket or of the
// object, where the bucket's object ownership does not disable ACLs).
// Nothing allowing it is an implicit deny.
//
// Principals Spindle accepts in a policy: "*" (everyone, anonymous
// requests included), {"AWS": "*"}, and {"AWS": [...]} naming S3 users by
// access key or by an IAM user ARN arn:aws:iam::ACCOUNT:user/NAME (any
// ACCOUNT; NAME a user's name or access key). NormalizePolicy rewrites
// every ARN to the user's access key before the policy is stored, so
// GetBucketPolicy answers the normalized document (as S3 normalizes
// principals too).
package s3perm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// MaxPolicyBytes bounds a bucket policy (S3's 20 KiB).
const MaxPolicyBytes = 20 << 10

// ErrPrincipal is a principal that names no Spindle user.
var ErrPrincipal = errors.New("invalid principal in policy")

// UserOf is the user name or access key a principal names: the
// principal itself, or NAME of arn:aws:iam::ACCOUNT:user/NAME. ok is
// false for "*" and for other ARNs (roles, accounts), which name no user.
func UserOf(principal string) (string, bool) {
	if principal == "" || principal == "*" {
		return "", false
	}
	if !strings.HasPrefix(principal, "arn:") {
		return principal, !strings.ContainsAny(principal, ":/*")
	}
	parts := strings.SplitN(principal, ":", 6)
	if len(parts) != 6 || parts[1] != "aws" || parts[2] != "iam" || parts[3] != "" {
		return "", false
	}
	name, ok := strings.CutPrefix(parts[5], "user/")
	if !ok || name == "" || strings.ContainsAny(name, "/*") {
		return "", false
	}
	return name, true
}

// NormalizePolicy returns the policy with every principal that names a
// user (UserOf) replaced by the access key resolve gives for it (resolve
// takes a user name or an access key); a principal resolve does not know
// is ErrPrincipal. Other members are kept as they are (object members are
// written in key order). The policy must be at most MaxPolicyBytes.
func NormalizePolicy(doc []byte, resolve func(nameOrAccess string) (string, bool)) ([]byte, error) {
	if len(doc) > MaxPolicyBytes {
		return nil, fmt.Errorf("policy of %d bytes, at most %d", len(doc), MaxPolicyBytes)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(doc, &top); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	raw, ok := top["Statement"]
	if !ok {
		return doc, nil
	}
	var stmts []map[string]json.RawMessage
	single := false
	if err := json.Unmarshal(raw, &stmts); err != nil {
		var one map[string]json.RawMessage
		if err := json.Unmarshal(raw, &one); err != nil {
			return nil, fmt.Errorf("policy statement: %w", err)
		}
		stmts, single = []map[string]json.RawMessage{one}, true
	}
	for _, st := range stmts {
		for _, field := range []string{"Principal", "NotPrincipal"} {
			p, ok := st[field]
			if !ok {
				continue
			}
			np, err := normalizePrincipal(p, resolve)
			if err != nil {
				return nil, err
			}
			st[field] = np
		}
	}
	var err error
	if single {
		top["Statement"], err = json.Marshal(stmts[0])
	} else {
		top["Statement"], err = json.Marshal(stmts)
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(top)
}

// normalizePrincipal rewrites one Principal element: "*", a string, a
// list, or {"AWS": string or list}.
func normalizePrincipal(p json.RawMessage, resolve func(string) (string, bool)) (json.RawMessage, error) {
	p = bytes.TrimSpace(p)
	if len(p) > 0 && p[0] == '{' {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(p, &m); err != nil {
			return nil, fmt.Errorf("principal: %w", err)
		}
		if aws, ok := m["AWS"]; ok {
			np, err := normalizePrincipal(aws, resolve)
			if err != nil {
				return nil, err
			}
			m["AWS"] = np
		}
		return json.Marshal(m)
	}
	var list []string
	single := false
	if err := json.Unmarshal(p, &list); err != nil {
		var one string
		if err := json.Unmarshal(p, &one); err != nil {
			return nil, fmt.Errorf("principal: %w", err)
		}
		list, single = []string{one}, true
	}
	for i, s := range list {
		if s == "*" {
			continue
		}
		name, ok := UserOf(s)
		if !ok {
			return nil, fmt.Errorf("%w: %s", ErrPrincipal, s)
		}
		access, ok := resolve(name)
		if !ok {
			return nil, fmt.Errorf("%w: no user %s", ErrPrincipal, name)
		}
		list[i] = access
	}
	if single {
		return json.Marshal(list[0])
	}
	return json.Marshal(slices.Compact(list))
}
