// Package s3acl is the S3 gateway's reading of ACL requests and writing of
// ACL answers (issue 32), over s3perm's documents: the ACL a PutObjectAcl
// or a new object's headers ask for (a canned ACL, x-amz-grant-* headers
// or an AccessControlPolicy document, checked against the bucket's object
// ownership), the grantees of PutBucketAcl's headers as stored, the
// AccessControlPolicy document GetObjectAcl and GetBucketAcl answer, and
// the meta service's grants as the gateway's IAM weighs them. Its errors
// are S3's (s3err).
//
// versitygw answers GetObjectAcl by writing the SDK's output struct as
// XML as it is, and names a bucket ACL's groups by ID: the gateway keeps
// the document S3 writes with the request (KeepObjectAnswer, KeepBucket:
// fasthttp user values of the request's context) and answers it once
// versitygw has (Answer, in the gateway's middleware).
//
// Concurrency: the functions keep no state (the kept answers belong to
// their request); safe for concurrent use.
package s3acl

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/gofiber/fiber/v3"
	"github.com/valyala/fasthttp"
	"github.com/versity/versitygw/auth"
	"github.com/versity/versitygw/s3err"

	"github.com/spindle-store/spindle/internal/s3perm"
	"github.com/spindle-store/spindle/internal/s3permapi"
)

// Known says whether an access key is a user's (the grantee of an id=).
type Known func(access string) (bool, error)

// invalid is S3's InvalidArgument.
func invalid(desc string) error {
	return s3err.APIError{Code: "InvalidArgument", Description: desc, HTTPStatusCode: 400}
}

// HeaderGrants reads the x-amz-grant-* headers header gives: their
// grants (nil: none sent), checked — not with a canned ACL, grantees
// Spindle knows (every id= a user's access key), ACLs enabled by the
// bucket's ownership.
func HeaderGrants(header func(string) string, canned, ownership string, known Known) ([]s3perm.Grant, error) {
	grants, err := s3perm.ParseGrantHeaders(header)
	if err != nil {
		return nil, invalid(err.Error())
	}
	if grants == nil {
		return nil, nil
	}
	if canned != "" {
		return nil, s3err.GetAPIError(s3err.ErrBothCannedAndHeaderGrants)
	}
	if !s3perm.ACLsEnabled(ownership) {
		return nil, s3err.GetAPIError(s3err.ErrAclNotSupported)
	}
	for _, g := range grants {
		if g.Type != s3perm.GranteeUser {
			continue
		}
		ok, err := known(g.ID)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, invalid("Invalid id: " + g.ID)
		}
	}
	return grants, nil
}

// Canned is s3perm.CannedGrants with S3's errors.
func Canned(canned, ownership string) ([]s3perm.Grant, error) {
	g, err := s3perm.CannedGrants(canned, ownership)
	switch {
	case errors.Is(err, s3perm.ErrACLsDisabled):
		return nil, s3err.GetAPIError(s3err.ErrAclNotSupported)
	case err != nil:
		return nil, s3err.GetInvalidArgumentErr(s3err.InvalidArgCannedAcl, canned)
	}
	return g, nil
}

// ForNewObject is the stored ACL (s3perm.EncodeGrants) of a new object
// put with x-amz-acl or x-amz-grant-* headers (header reads the
// request's), checked against the bucket's ownership; "" for none.
func ForNewObject(header func(string) string, ownership string, known Known) (string, error) {
	g, err := HeaderGrants(header, header("X-Amz-Acl"), ownership, known)
	if err == nil && g == nil {
		g, err = Canned(header("X-Amz-Acl"), ownership)
	}
	if err != nil {
		return "", err
	}
	return s3perm.EncodeGrants(g), nil
}

// Asked reports whether header carries an ACL for a new object.
func Asked(header func(string) string) bool {
	asked := header("X-Amz-Acl") != ""
	for _, h := range s3perm.GrantHeaders {
		asked = asked || header(h.Header) != ""
	}
	return asked
}

// ForPutObjectAcl is the ACL a PutObjectAcl asks for: a canned ACL, grants
// of x-amz-grant-* headers or an AccessControlPolicy document (body),
// one of them. Under BucketOwnerEnforced only the owner's own ACL is
// accepted (AccessControlListNotSupported).
func ForPutObjectAcl(in *s3.PutObjectAclInput, body []byte, bk *s3permapi.Bucket, known Known) ([]s3perm.Grant, error) {
	headers := map[string]*string{"X-Amz-Grant-Read": in.GrantRead, "X-Amz-Grant-Write": in.GrantWrite,
		"X-Amz-Grant-Read-Acp": in.GrantReadACP, "X-Amz-Grant-Write-Acp": in.GrantWriteACP, "X-Amz-Grant-Full-Control": in.GrantFullControl}
	headerGrants, err := HeaderGrants(func(h string) string {
		if v := headers[h]; v != nil {
			return *v
		}
		return ""
	}, string(in.ACL), bk.Ownership, known)
	switch {
	case err != nil:
		return nil, err
	case len(body) > 0:
		if in.ACL != "" || headerGrants != nil {
			return nil, s3err.GetAPIError(s3err.ErrUnexpectedContent)
		}
		owner, g, err := s3perm.ParseAccessControlPolicy(body)
		if err != nil {
			return nil, s3err.GetAPIError(s3err.ErrMalformedACL)
		}
		if owner != bk.Owner {
			return nil, invalid("Invalid id")
		}
		if len(g) > 0 && !s3perm.ACLsEnabled(bk.Ownership) {
			return nil, s3err.GetAPIError(s3err.ErrAclNotSupported)
		}
		return g, nil
	case headerGrants != nil:
		return headerGrants, nil
	}
	return Canned(string(in.ACL), bk.Ownership)
}

// NormalizeBucketACL rewrites the grantees of PutBucketAcl's
// x-amz-grant-* headers, which versitygw keeps as they were written
// (id="KEY", uri="GROUP"), as the user's access key or the group
// (all-users, authenticated-users) of versitygw's ACL document.
func NormalizeBucketACL(data []byte) ([]byte, error) {
	acl, err := auth.ParseACL(data)
	if err != nil {
		return nil, err
	}
	for i, g := range acl.Grantees {
		if !strings.Contains(g.Access, "=") {
			continue
		}
		gr, err := s3perm.ParseGrantee(g.Access, string(g.Permission))
		if err != nil {
			return nil, invalid(err.Error())
		}
		acl.Grantees[i].Access, acl.Grantees[i].Type = gr.ID, types.TypeCanonicalUser
		if gr.Type != s3perm.GranteeUser {
			acl.Grantees[i].Access, acl.Grantees[i].Type = gr.Type, types.TypeGroup
		}
	}
	return json.Marshal(acl)
}

// BucketGrants are a bucket ACL's grants (versitygw's document) but the
// owner's FULL_CONTROL: users by access key, the AllUsers and
// AuthenticatedUsers groups.
func BucketGrants(acl auth.ACL, owner string) []s3perm.Grant {
	var out []s3perm.Grant
	for _, g := range acl.Grantees {
		switch {
		case g.Type == types.TypeGroup && (g.Access == s3perm.GranteeAllUsers || g.Access == s3perm.GranteeAuthenticated):
			out = append(out, s3perm.Grant{Type: g.Access, Permission: string(g.Permission)})
		case g.Type == types.TypeCanonicalUser && (g.Access != owner || g.Permission != auth.PermissionFullControl):
			out = append(out, s3perm.Grant{Type: s3perm.GranteeUser, ID: g.Access, Permission: string(g.Permission)})
		}
	}
	return out
}

// ObjectACLOutput is GetObjectAcl's output: the owner's FULL_CONTROL and
// the object's grants.
func ObjectACLOutput(owner string, grants []s3perm.Grant) *s3.GetObjectAclOutput {
	ptr := func(s string) *string { return &s }
	out := &s3.GetObjectAclOutput{Owner: &types.Owner{ID: ptr(owner)},
		Grants: []types.Grant{{Grantee: &types.Grantee{Type: types.TypeCanonicalUser, ID: ptr(owner)}, Permission: types.PermissionFullControl}}}
	for _, g := range grants {
		gr := types.Grant{Grantee: &types.Grantee{}, Permission: types.Permission(g.Permission)}
		switch g.Type {
		case s3perm.GranteeUser:
			gr.Grantee.Type, gr.Grantee.ID = types.TypeCanonicalUser, ptr(g.ID)
		case s3perm.GranteeAllUsers:
			gr.Grantee.Type, gr.Grantee.URI = types.TypeGroup, ptr(s3perm.AllUsersURI)
		case s3perm.GranteeAuthenticated:
			gr.Grantee.Type, gr.Grantee.URI = types.TypeGroup, ptr(s3perm.AuthenticatedUsersURI)
		}
		out.Grants = append(out.Grants, gr)
	}
	return out
}

// objectAnswer keys, in a request's context, the GetObjectAcl answer;
// bucketAnswer the permissions of the request's bucket.
type (
	objectAnswer struct{}
	bucketAnswer struct{}
)

// KeepObjectAnswer keeps with ctx's request (a *fasthttp.RequestCtx; else
// nothing) the document its GetObjectAcl answers.
func KeepObjectAnswer(ctx context.Context, owner string, grants []s3perm.Grant) {
	if rc, ok := ctx.(*fasthttp.RequestCtx); ok {
		rc.SetUserValue(objectAnswer{}, s3perm.AccessControlPolicyXML(owner, grants))
	}
}

// KeepBucket keeps with ctx's request its bucket's permissions (for a
// GetBucketAcl's answer).
func KeepBucket(ctx context.Context, bk *s3permapi.Bucket) {
	if rc, ok := ctx.(*fasthttp.RequestCtx); ok {
		rc.SetUserValue(bucketAnswer{}, bk)
	}
}

// Answer, run once versitygw answered a request, replaces the body of a
// successful GetObjectAcl by the document kept, and that of a
// GetBucketAcl (a GET with the acl parameter that is not one) by the
// bucket's ACL as S3 writes it.
func Answer(c fiber.Ctx) {
	if c.Response().StatusCode() != fiber.StatusOK {
		return
	}
	doc, ok := c.RequestCtx().UserValue(objectAnswer{}).([]byte)
	if !ok {
		bk, isBucket := c.RequestCtx().UserValue(bucketAnswer{}).(*s3permapi.Bucket)
		if !isBucket || c.Method() != fiber.MethodGet || !c.Request().URI().QueryArgs().Has("acl") {
			return
		}
		acl, err := auth.ParseACL(bk.ACL)
		if err != nil {
			return // versitygw's answer stands
		}
		doc = s3perm.AccessControlPolicyXML(bk.Owner, BucketGrants(acl, bk.Owner))
	}
	c.Response().Header.SetContentType(fiber.MIMEApplicationXML)
	c.Response().SetBody(doc)
}

// UserGrants are the grants of the user of access among a bucket's.
func UserGrants(bk *s3permapi.Bucket, access string) []s3perm.UserGrant {
	var out []s3perm.UserGrant
	for _, g := range bk.Grants {
		if g.Access == access {
			out = append(out, s3perm.UserGrant{Prefix: g.Prefix, Actions: g.Actions})
		}
	}
	return out
}

// GrantTarget is what a grant must cover for action a: the object's key,
// a listing's prefix (s3:prefix), else the whole bucket ("").
func GrantTarget(a auth.Action, key string, cond map[string][]string) string {
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
