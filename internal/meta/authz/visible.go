package authz

import (
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/spindle-store/spindle/internal/meta/state"
	api "github.com/spindle-store/spindle/internal/metaapi/authz"
	"github.com/spindle-store/spindle/internal/s3permapi"
)

// Visible says whether id may see that bucket exists in a listing of
// buckets: everything for who may do everything, else the buckets it
// owns and those it holds a grant on (any action, any prefix). Caller
// holds st.Mu (either mode).
func Visible(st *state.State, id Identity, bucket string) (bool, error) {
	p, owner, all, err := principal(st, id)
	if err != nil || all {
		return all, nil // a principal with no rights sees nothing
	}
	brec, ok := st.Buckets[bucket]
	if !ok {
		return false, nil
	}
	if brec.Owner != "" && brec.Owner == owner {
		return true, nil
	}
	return anyGrant(st, p, bucket)
}

// anyGrant says whether principal p holds some grant on bucket.
func anyGrant(st *state.State, p, bucket string) (ok bool, err error) {
	lo := principalPrefix(bucket, p)
	it, err := st.Store.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: state.PrefixEnd(lo)})
	if err != nil {
		return false, err
	}
	defer state.CloseInto(it, &err, "grants of "+bucket)
	return it.First(), it.Error()
}

// S3UserGrants are the grants of S3 users ("user:NAME") on bucket, each
// naming the user by access key (the S3 gateway's name for it; a grant
// of a user that does not exist is left out), for the gateway's own
// decision (s3permapi.Bucket.Grants). Caller holds st.Mu (either mode).
func S3UserGrants(st *state.State, bucket string) ([]s3permapi.UserGrant, error) {
	var out []s3permapi.UserGrant
	err := scan(st, bucket, func(_, p, prefix string, rec record) {
		name, ok := strings.CutPrefix(p, api.UserPrefix)
		if !ok {
			return
		}
		u, ok := st.S3.Users[name]
		if !ok {
			return
		}
		out = append(out, s3permapi.UserGrant{Access: u.AccessKey, Prefix: prefix, Actions: rec.names()})
	})
	return out, err
}
