package s3gw

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/versity/versitygw/auth"

	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/s3perm"
	"github.com/spindle-store/spindle/internal/s3permapi"
)

// The IAM is also versitygw's auth.PolicyEvaluator: the identity side of
// every authorization (s3perm.Allowed: the bucket owner's rights, bucket
// and object ACL grants; s3perm.ByGrant: the meta service's grants of the
// user, cached with the bucket's permissions, PermCache). versitygw
// combines it with the bucket policy's decision as AWS does: the policy's
// explicit Deny wins, then an Allow of either; without a policy, with the
// bucket ACL's. And an auth.PrincipalResolver: a policy may name users by
// IAM user ARN.

var (
	_ auth.PolicyEvaluator   = (*IAM)(nil)
	_ auth.PrincipalResolver = (*IAM)(nil)
)

// Decisions as versitygw's PolicyEvaluation holds them (its type is
// unexported; untyped constants convert): no match, allow.
const (
	decisionNoMatch = 0
	decisionAllow   = 1
)

// EvaluatePolicy decides each action on each resource for the user of
// access: allowed (s3perm.Allowed, s3perm.ByGrant) or no match (an implicit deny unless
// the bucket policy allows). Creating a bucket and listing one's buckets
// are every user's (the buckets listed are the caller's own).
func (m *IAM) EvaluatePolicy(access, _ string, actions []auth.Action, resources []string, cond map[string][]string) (auth.PolicyEvaluation, error) {
	ctx, cancel := iamCtx()
	defer cancel()
	ev := auth.PolicyEvaluation{PrincipalArn: access}
	for _, res := range resources {
		ev.Decisions = append(ev.Decisions, nil)
		row := &ev.Decisions[len(ev.Decisions)-1]
		for _, a := range actions {
			ok, err := m.allowed(ctx, access, a, res, cond)
			if err != nil {
				return auth.PolicyEvaluation{}, err
			}
			if ok {
				*row = append(*row, decisionAllow)
			} else {
				*row = append(*row, decisionNoMatch)
			}
		}
	}
	return ev, nil
}

func (m *IAM) allowed(ctx context.Context, access string, a auth.Action, resource string, cond map[string][]string) (bool, error) {
	if a == auth.CreateBucketAction || a == auth.ListAllMyBucketsAction {
		return true, nil
	}
	bucket, key, ok := splitARN(resource)
	if !ok {
		return false, nil
	}
	bk, err := m.perms.bucket(ctx, bucket)
	if err != nil {
		return false, nil // no such bucket: nothing to allow (the operation answers NoSuchBucket)
	}
	if access != "" && s3perm.ByGrant(userGrants(bk, access), string(a), grantTarget(a, key, cond)) {
		return true, nil // the meta service's grants (s3perm.ByGrant)
	}
	req := s3perm.Request{Access: access, Action: string(a), Object: key != "", Owner: bk.Owner, Ownership: bk.Ownership}
	if access == bk.Owner || !s3perm.ACLsEnabled(bk.Ownership) {
		return s3perm.Allowed(req), nil
	}
	acl, err := auth.ParseACL(bk.ACL)
	if err != nil {
		return false, err
	}
	for _, g := range acl.Grantees {
		switch {
		case g.Type == types.TypeGroup && (g.Access == s3perm.GranteeAllUsers || g.Access == s3perm.GranteeAuthenticated):
			req.BucketGrants = append(req.BucketGrants, s3perm.Grant{Type: g.Access, Permission: string(g.Permission)})
		case g.Type == types.TypeCanonicalUser:
			req.BucketGrants = append(req.BucketGrants, s3perm.Grant{Type: s3perm.GranteeUser, ID: g.Access, Permission: string(g.Permission)})
		}
	}
	if key != "" && s3perm.NeedsObjectGrants(req.Action) {
		ki, err := m.meta.GetKey(ctx, bucket, key)
		if err != nil {
			if errors.Is(err, metaapi.ErrNotFound) {
				return false, nil
			}
			return false, err
		}
		if req.ObjectGrants, err = s3perm.DecodeGrants(objectACL(&ki)); err != nil {
			return false, err
		}
	}
	return s3perm.Allowed(req), nil
}

// userGrants are the grants of the user of access among a bucket's.
func userGrants(bk *s3permapi.Bucket, access string) []s3perm.UserGrant {
	var out []s3perm.UserGrant
	for _, g := range bk.Grants {
		if g.Access == access {
			out = append(out, s3perm.UserGrant{Prefix: g.Prefix, Actions: g.Actions})
		}
	}
	return out
}

// grantTarget is what a grant must cover for action a: the object's key,
// a listing's prefix (s3:prefix), else the whole bucket ("").
func grantTarget(a auth.Action, key string, cond map[string][]string) string {
	switch {
	case key != "":
		return key
	case a == auth.ListBucketAction || a == auth.ListBucketVersionsAction || a == auth.ListBucketMultipartUploadsAction:
		if p := cond["s3:prefix"]; len(p) == 1 {
			return p[0]
		}
	}
	return ""
}

// ResolvePrincipals returns the principals of a policy that name no
// user: not an access key, nor an IAM user ARN of a user's name or
// access key (s3perm.UserOf).
func (m *IAM) ResolvePrincipals(principals []string) ([]string, error) {
	ctx, cancel := iamCtx()
	defer cancel()
	var missing []string
	for _, p := range principals {
		name, ok := s3perm.UserOf(p)
		if ok {
			_, ok = resolveUser(ctx, m.meta, name)
		}
		if !ok {
			missing = append(missing, p)
		}
	}
	return missing, nil
}
