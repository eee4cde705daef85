package authz

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	api "github.com/spindle-store/spindle/internal/metaapi/authz"
)

// Grants are the grant records over a State.
type Grants struct{ *state.State }

// NewGrants is the grants of st.
func NewGrants(st *state.State) *Grants { return &Grants{st} }

// Add gives g.Principal g.Action on g.Bucket[/g.Prefix], if id may (admin
// on that bucket or prefix); adding what it has changes nothing.
func (s *Grants) Add(id Identity, g api.GrantChange) error {
	if err := g.Validate(); err != nil {
		return err
	}
	_, err := state.Mutate(s.State, func() (struct{}, *pebble.Batch, error) {
		rec, k, err := s.target(id, g)
		if err != nil {
			return struct{}{}, nil, err
		}
		bit := actionBits[g.Action]
		if rec.actions&bit != 0 {
			return struct{}{}, nil, nil
		}
		if rec.actions == 0 {
			rec.created = s.Cfg.Now()
		}
		rec.actions |= bit
		b := s.Store.NewBatch()
		state.Set(b, k, rec.encode())
		return struct{}{}, b, nil
	})
	return err
}

// Revoke takes g.Action from g.Principal on g.Bucket[/g.Prefix], if id
// may; ErrNotFound when it was not given.
func (s *Grants) Revoke(id Identity, g api.GrantChange) error {
	if err := g.Validate(); err != nil {
		return err
	}
	_, err := state.Mutate(s.State, func() (struct{}, *pebble.Batch, error) {
		rec, k, err := s.target(id, g)
		if err != nil {
			return struct{}{}, nil, err
		}
		bit := actionBits[g.Action]
		if rec.actions&bit == 0 {
			return struct{}{}, nil, fmt.Errorf("%w: %s has no %s grant on %s", metaapi.ErrNotFound, g.Principal, g.Action, target(g))
		}
		rec.actions &^= bit
		b := s.Store.NewBatch()
		if rec.actions == 0 {
			state.Del(b, k)
		} else {
			state.Set(b, k, rec.encode())
		}
		return struct{}{}, b, nil
	})
	return err
}

func target(g api.GrantChange) string {
	if g.Prefix == "" {
		return g.Bucket
	}
	return g.Bucket + "/" + g.Prefix
}

// target checks, under s.mu, that the bucket exists and id holds admin
// on the grant's bucket or prefix, and reads the grant's record (zero:
// none).
func (s *Grants) target(id Identity, g api.GrantChange) (rec record, k []byte, err error) {
	if _, ok := s.Buckets[g.Bucket]; !ok {
		return rec, nil, fmt.Errorf("%w %s", metaapi.ErrNoSuchBucket, g.Bucket)
	}
	if err := Check(s.State, id, api.Admin, g.Bucket, g.Prefix); err != nil {
		return rec, nil, err
	}
	k = grantKey(g.Bucket, g.Principal, g.Prefix)
	v, closer, gerr := s.Store.Get(k)
	if gerr == pebble.ErrNotFound {
		return rec, k, nil
	}
	if gerr != nil {
		return rec, nil, gerr
	}
	defer state.CloseInto(closer, &err, "read grant")
	rec, err = decode(v)
	return rec, k, err
}

// List lists the grants of bucket (every bucket's when ""), by bucket,
// principal and prefix: id needs admin on the bucket (every bucket's
// list: an admin certificate).
func (s *Grants) List(id Identity, bucket string) ([]api.Grant, error) {
	if bucket != "" {
		if err := metaapi.ValidBucket(bucket); err != nil {
			return nil, err
		}
	}
	return state.Read(s.State, func() ([]api.Grant, error) {
		if bucket != "" {
			if _, ok := s.Buckets[bucket]; !ok {
				return nil, fmt.Errorf("%w %s", metaapi.ErrNoSuchBucket, bucket)
			}
		}
		if _, _, all, err := principal(s.State, id); bucket == "" && (err != nil || !all) {
			return nil, fmt.Errorf("%w: listing every bucket's grants needs an admin certificate (name a bucket you administer)", metaapi.ErrForbidden)
		}
		if err := Check(s.State, id, api.Admin, bucket, ""); err != nil {
			return nil, err
		}
		out := []api.Grant{}
		err := scan(s.State, bucket, func(b, p, prefix string, rec record) {
			out = append(out, api.Grant{Principal: p, Bucket: b, Prefix: prefix, Actions: rec.names(), Created: rec.created.UTC()})
		})
		return out, err
	})
}

// scan calls fn for every grant of bucket ("" every bucket), in key order.
func scan(st *state.State, bucket string, fn func(bucket, p, prefix string, rec record)) (err error) {
	lo := []byte{PrefixGrant}
	if bucket != "" {
		lo = bucketPrefix(bucket)
	}
	it, err := st.Store.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: state.PrefixEnd(lo)})
	if err != nil {
		return err
	}
	defer state.CloseInto(it, &err, "grants")
	for ok := it.First(); ok; ok = it.Next() {
		b, p, prefix, err := parseKey(it.Key())
		if err != nil {
			return err
		}
		rec, err := decode(it.Value())
		if err != nil {
			return fmt.Errorf("grant %q: %w", it.Key(), err)
		}
		fn(b, p, prefix, rec)
	}
	return it.Error()
}

// Validate decodes every grant record (Open: a corrupt one refuses the
// store, as any record does).
func Validate(st *state.State) error {
	return scan(st, "", func(string, string, string, record) {})
}

// DropBucket adds to b the removal of every grant of bucket (its
// deletion: a bucket created again later starts with none). Caller holds
// st.Mu for writing.
func DropBucket(st *state.State, b *pebble.Batch, bucket string) error {
	var keys [][]byte
	err := scan(st, bucket, func(_, p, prefix string, _ record) { keys = append(keys, grantKey(bucket, p, prefix)) })
	for _, k := range keys {
		state.Del(b, k)
	}
	return err
}
