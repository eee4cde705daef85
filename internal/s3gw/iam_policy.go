package s3gw

import (
	"context"
	"errors"

	"github.com/versity/versitygw/auth"

	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/s3gw/s3acl"
	"github.com/spindle-store/spindle/internal/s3perm"
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
	if access != "" && s3perm.ByGrant(s3acl.UserGrants(bk, access), string(a), s3acl.GrantTarget(a, key, cond)) {
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
	req.BucketGrants = s3acl.BucketGrants(acl, "")
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
