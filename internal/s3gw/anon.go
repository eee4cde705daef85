package s3gw

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v3"
	"github.com/versity/versitygw/auth"
	"github.com/versity/versitygw/s3api/utils"

	"github.com/spindle-store/spindle/internal/s3perm"
)

// Anonymous reads of objects whose ACL grants READ to everyone.
// versitygw lets an unsigned request through only where the bucket's
// policy or ACL makes the bucket public; S3 also serves an object that is
// public itself (public-read, public-read-write). anonymousRead, mounted
// before versitygw's routes, finds such an unsigned GET or HEAD of an
// object and marks the request public for versitygw (its public-bucket
// context keys: no signature checked, no further authorization), unless
// the bucket's ownership disables ACLs or its policy denies the anonymous
// read explicitly. Every other unsigned request goes on unchanged, to be
// refused unless a policy or ACL allows it.

// publicReadQuery are the query parameters a plain GET or HEAD of an
// object may carry (anything else is another operation).
var publicReadQuery = map[string]bool{"partNumber": true, "response-cache-control": true, "response-content-disposition": true,
	"response-content-encoding": true, "response-content-language": true, "response-content-type": true, "response-expires": true}

func (p *perms) anonymousRead(c fiber.Ctx, domain string) {
	if m := c.Method(); m != http.MethodGet && m != http.MethodHead {
		return
	}
	if c.Get("Authorization") != "" || (domain != "" && strings.HasSuffix(c.Hostname(), "."+domain)) {
		return
	}
	for k := range c.Request().URI().QueryArgs().All() {
		if !publicReadQuery[string(k)] {
			return // presigned (X-Amz-*), or a subresource
		}
	}
	path, err := url.PathUnescape(string(c.Request().URI().PathOriginal()))
	if err != nil {
		return
	}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	bucket, key, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	if bucket == "" || key == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithValue(c.Context(), anonLookup{}, true), iamTimeout)
	defer cancel()
	if p.publicObject(ctx, bucket, key, c.IP(), c.Secure()) {
		utils.ContextKeyAuthenticated.Set(c, true)
		utils.ContextKeyPublicBucket.Set(c, true)
	}
}

// publicObject reports whether bucket/key's ACL lets everyone read it and
// the bucket's ownership and policy do not forbid it.
func (p *perms) publicObject(ctx context.Context, bucket, key, ip string, secure bool) bool {
	bk, err := p.cache.bucket(ctx, bucket)
	if err != nil || !s3perm.ACLsEnabled(bk.Ownership) {
		return false
	}
	if len(bk.Policy) > 0 {
		cond := map[string][]string{"aws:SecureTransport": {strconv.FormatBool(secure)}, "aws:SourceIp": {ip}}
		err := auth.VerifyPublicBucketPolicy(bk.Policy, bucket, key, cond, nil, auth.GetObjectAction)
		// versitygw tells an explicit Deny from no match by its message only.
		if err != nil && err.Error() == "explicit deny" {
			return false
		}
	}
	ki, err := p.meta.GetKey(ctx, bucket, key)
	if err != nil {
		return false
	}
	grants, err := s3perm.DecodeGrants(objectACL(&ki))
	return err == nil && s3perm.Allows(grants, "", s3perm.PermRead)
}
