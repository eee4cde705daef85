package s3gw

import (
	"context"
	"net/http"

	"github.com/versity/versitygw/auth"
	"github.com/versity/versitygw/s3api/utils"

	"github.com/spindle-store/spindle/internal/httpdirect"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/authz"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// The gateway names, on each call to the meta service made for an S3
// request, the user the request was signed by (authz.S3UserHeader: its
// access key, or authz.S3Root for the root user): the meta service checks
// that user's rights on the bucket and key (package meta/authz), and
// believes the name only from the gateway's certificate. The user comes
// from the request's context, where versitygw's authentication put it
// (the Backend is called with that context, and the meta client's
// requests carry it). Calls without one (the IAM lookups) are the
// gateway's own: they touch no bucket.
//
// The calls made for an S3 request once versitygw authenticated its user,
// or for an anonymous request versitygw or anonymousRead found public,
// also say that the gateway authorizes them (authz.S3AuthorizedHeader):
// the meta service then lets a user in whom the bucket's policy or ACLs
// may let in, S3's decision being the gateway's (grants alone it checks
// itself).
//
// The meta client of the gateway sends each call alone (NoBatching): a
// batch is one request, which names one user. Its allocations come from
// pools kept by caller and bucket (callerScope, package allocpool): a
// refill is made as the user whose put found the pool empty, and its
// blocks go only to that user's puts in that bucket. A put above
// MaxInlineBytes then costs the meta service one replicated step.

// requestUser is the S3 user of a request's context ("" none: an
// anonymous request, or a call of the gateway's own).
func requestUser(ctx context.Context) string {
	if root, _ := ctx.Value(string(utils.ContextKeyIsRoot)).(bool); root {
		return authz.S3Root
	}
	if a, ok := ctx.Value(string(utils.ContextKeyAccount)).(auth.Account); ok && a.Access != "" {
		return a.Access
	}
	return ""
}

// anonLookup marks the context of anonymousRead's look-up of an object's
// ACL (an unsigned request, before versitygw: authorized to read the ACL).
type anonLookup struct{}

// requestAuthorized says ctx is an S3 request's that the gateway
// authorizes (a user's, a public one's, or anonymousRead's look-up).
func requestAuthorized(ctx context.Context) bool {
	if requestUser(ctx) != "" || ctx.Value(anonLookup{}) != nil {
		return true
	}
	pub, _ := ctx.Value(string(utils.ContextKeyPublicBucket)).(bool)
	return pub
}

// preAllocate bounds a refill of the gateway's allocation pools.
const preAllocate = metaapi.MaxPreAllocate

// callerScope is the allocation pool of a call's context: its user, and
// whether the gateway authorizes it (the two things a request to the
// meta service says of its caller).
func callerScope(ctx context.Context) string {
	if requestAuthorized(ctx) {
		return "a:" + requestUser(ctx)
	}
	return "-:" + requestUser(ctx)
}

// metaClient is the gateway's client of the meta service at addr: every
// call alone, naming its request's user; an allocation pool per caller.
func metaClient(addr string, sec *tlsconf.Settings) (*metaapi.Client, error) {
	base := httpdirect.ForMeta(sec)
	return metaapi.NewClient(addr, metaapi.ClientOptions{TLS: sec, NoBatching: true, PreAllocate: preAllocate, PoolScope: callerScope,
		HTTPClient: &http.Client{Transport: &authz.Transport{Base: base, Who: requestUser, Authorized: requestAuthorized}}})
}
