package namespace

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/kek"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/s3permapi"
)

// S3 users and bucket owners (the S3 gateway's identities). Users are
// records 'U'|name, all held in memory (s.s3) and indexed by access key;
// every change goes through mutate (commit.go), like every other record.

// validUserName: 1..MaxUserNameBytes of letters, digits, '-', '_', '.', '@'.
func validUserName(name string) error {
	if len(name) == 0 || len(name) > metaapi.MaxUserNameBytes {
		return fmt.Errorf("%w: user name %q: want 1..%d characters", metaapi.ErrInvalid, name, metaapi.MaxUserNameBytes)
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '@') {
			return fmt.Errorf("%w: user name %q: only letters, digits, '-', '_', '.', '@'", metaapi.ErrInvalid, name)
		}
	}
	return nil
}

// Access and secret keys as AWS, MinIO and Ceph accept them (issue 33
// item 5): an access key of MinAccessKeyBytes..MaxAccessKeyBytes letters
// (either case), digits and AccessKeyPunct (MinIO refuses only '=' and
// ','; '/' and spaces would break a SigV4 credential scope); a secret of
// MinSecretKeyBytes..MaxSecretKeyBytes printable ASCII characters without
// spaces.
const (
	MinAccessKeyBytes = 3
	MinSecretKeyBytes = 8
	AccessKeyPunct    = "-_.@+"
)

func validKeys(access, secret string) error {
	if len(access) < MinAccessKeyBytes || len(access) > metaapi.MaxAccessKeyBytes {
		return fmt.Errorf("%w: access key: want %d..%d characters", metaapi.ErrInvalid, MinAccessKeyBytes, metaapi.MaxAccessKeyBytes)
	}
	for _, c := range []byte(access) {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte(AccessKeyPunct, c) >= 0) {
			return fmt.Errorf("%w: access key %q: only letters, digits and %q", metaapi.ErrInvalid, access, AccessKeyPunct)
		}
	}
	if len(secret) < MinSecretKeyBytes || len(secret) > metaapi.MaxSecretKeyBytes {
		return fmt.Errorf("%w: secret key: want %d..%d characters", metaapi.ErrInvalid, MinSecretKeyBytes, metaapi.MaxSecretKeyBytes)
	}
	for _, c := range []byte(secret) {
		if c <= ' ' || c > '~' {
			return fmt.Errorf("%w: secret key: only printable ASCII without spaces", metaapi.ErrInvalid)
		}
	}
	return nil
}

// GenerateKeys returns a random access key (20 characters A-Z2-7) and
// secret (40 characters of base64url).
func GenerateKeys() (access, secret string) {
	a := make([]byte, 15)
	b := make([]byte, 30)
	rand.Read(a)
	rand.Read(b)
	return base32NoPad(a)[:20], base64.RawURLEncoding.EncodeToString(b)
}

func base32NoPad(b []byte) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	out := make([]byte, 0, len(b)*8/5)
	var acc, bits uint
	for _, c := range b {
		acc = acc<<8 | uint(c)
		bits += 8
		for bits >= 5 {
			bits -= 5
			out = append(out, alphabet[(acc>>bits)&31])
		}
	}
	return string(out)
}

// CreateUser creates an S3 user; empty keys are generated. ErrExists when
// the name or the access key is taken.
func (s *S3Users) CreateUser(req *metaapi.CreateUser) (*metaapi.User, error) {
	if err := validUserName(req.Name); err != nil {
		return nil, err
	}
	access, secret := req.AccessKey, req.SecretKey
	if access == "" || secret == "" {
		ga, gs := GenerateKeys()
		if access == "" {
			access = ga
		}
		if secret == "" {
			secret = gs
		}
	}
	if err := validKeys(access, secret); err != nil {
		return nil, err
	}
	return state.Mutate(s.State, func() (*metaapi.User, *pebble.Batch, error) {
		if _, ok := s.S3.Users[req.Name]; ok {
			return nil, nil, fmt.Errorf("%w: user %s", metaapi.ErrExists, req.Name)
		}
		if other, ok := s.S3.ByAccess[access]; ok {
			return nil, nil, fmt.Errorf("%w: access key %s belongs to user %s", metaapi.ErrExists, access, other)
		}
		rec := state.UserRecord{Created: s.Cfg.Now(), AccessKey: access, Sealed: s.Cfg.KEK.Seal([]byte(secret), state.UserAD(req.Name))}
		b := s.Store.NewBatch()
		state.Set(b, state.UserKey(req.Name), rec.Encode())
		s.S3.Users[req.Name] = rec
		s.S3.ByAccess[access] = req.Name
		return &metaapi.User{Name: req.Name, AccessKey: access, SecretKey: secret, Created: rec.Created}, b, nil
	})
}

// Users lists the users by name, without secrets.
func (s *S3Users) Users() (*metaapi.UserList, error) {
	return state.Read(s.State, func() (*metaapi.UserList, error) {
		l := &metaapi.UserList{Users: []metaapi.User{}}
		for _, name := range slices.Sorted(maps.Keys(s.S3.Users)) {
			u := s.S3.Users[name]
			l.Users = append(l.Users, metaapi.User{Name: name, AccessKey: u.AccessKey, Created: u.Created})
		}
		return l, nil
	})
}

// DeleteUser deletes a user (its buckets keep their owner's access key).
func (s *S3Users) DeleteUser(name string) error {
	_, err := state.Mutate(s.State, func() (struct{}, *pebble.Batch, error) {
		u, ok := s.S3.Users[name]
		if !ok {
			return struct{}{}, nil, fmt.Errorf("%w: user %s", metaapi.ErrNotFound, name)
		}
		b := s.Store.NewBatch()
		state.Del(b, state.UserKey(name))
		delete(s.S3.Users, name)
		delete(s.S3.ByAccess, u.AccessKey)
		return struct{}{}, b, nil
	})
	return err
}

// UserByAccessKey returns the user of an access key, with its secret
// (opened with the KEK).
func (s *S3Users) UserByAccessKey(access string) (*metaapi.User, error) {
	return state.Read(s.State, func() (*metaapi.User, error) {
		name, ok := s.S3.ByAccess[access]
		if !ok {
			return nil, fmt.Errorf("%w: access key %s", metaapi.ErrNotFound, access)
		}
		u := s.S3.Users[name]
		secret, err := s.secretOf(name, u)
		if err != nil {
			return nil, err
		}
		return &metaapi.User{Name: name, AccessKey: u.AccessKey, SecretKey: secret, Created: u.Created}, nil
	})
}

// secretOf opens a user's secret (a record written before sealing holds
// it in plaintext).
func (s *S3Users) secretOf(name string, u state.UserRecord) (string, error) {
	if len(u.Sealed) == 0 {
		return u.SecretKey, nil
	}
	p, err := s.Cfg.KEK.Open(u.Sealed, state.UserAD(name))
	if err != nil {
		s.Log.Error("an S3 secret does not open: is this member's key encryption key the group's? (docs/OPERATIONS.md §4)", "user", name, "err", err)
		return "", fmt.Errorf("%w: user %s: %v", metaapi.ErrUnavailable, name, err)
	}
	return string(p), nil
}

// SetUserKeys sets user name's keys, creating the user when it does not
// exist: an empty access key keeps the user's (a new user's is
// generated), an empty secret is generated. The old access key is
// released in the same batch. The server sets its root user's keys so
// (a changed root key replaces the old one: no stray user is left).
func (s *S3Users) SetUserKeys(name, access, secret string) (*metaapi.User, error) {
	if err := validUserName(name); err != nil {
		return nil, err
	}
	ga, gs := GenerateKeys()
	if secret == "" {
		secret = gs
	}
	return state.Mutate(s.State, func() (*metaapi.User, *pebble.Batch, error) {
		old, exists := s.S3.Users[name]
		access := access
		switch {
		case access == "" && exists:
			access = old.AccessKey
		case access == "":
			access = ga
		}
		if err := validKeys(access, secret); err != nil {
			return nil, nil, err
		}
		if other, ok := s.S3.ByAccess[access]; ok && other != name {
			return nil, nil, fmt.Errorf("%w: access key %s belongs to user %s", metaapi.ErrExists, access, other)
		}
		rec := state.UserRecord{Created: s.Cfg.Now(), AccessKey: access}
		if exists {
			rec.Created = old.Created
			if cur, err := s.secretOf(name, old); err == nil && cur == secret && old.AccessKey == access {
				// The same keys: nothing to write (a restarted server).
				return &metaapi.User{Name: name, AccessKey: access, SecretKey: secret, Created: old.Created}, nil, nil
			}
		}
		rec.Sealed = s.Cfg.KEK.Seal([]byte(secret), state.UserAD(name))
		b := s.Store.NewBatch()
		state.Set(b, state.UserKey(name), rec.Encode())
		if exists {
			delete(s.S3.ByAccess, old.AccessKey)
		}
		s.S3.Users[name] = rec
		s.S3.ByAccess[access] = name
		return &metaapi.User{Name: name, AccessKey: access, SecretKey: secret, Created: rec.Created}, b, nil
	})
}

// resealBatch bounds the users one batch of ResealUsers re-seals.
const resealBatch = 1000

// ResealUsers seals every user's secret under the KEK's current key: those
// sealed under an older key, and plaintext ones of a store written before
// sealing. It returns how many it sealed anew. Every secret must open
// (ErrUnavailable otherwise, with the batches done so far kept).
func (s *S3Users) ResealUsers() (int, error) {
	total := 0
	for {
		n, err := state.Mutate(s.State, func() (int, *pebble.Batch, error) {
			cur := s.Cfg.KEK.Current()
			resealed := map[string]state.UserRecord{}
			for _, name := range slices.Sorted(maps.Keys(s.S3.Users)) {
				u := s.S3.Users[name]
				if id, err := kek.KeyID(u.Sealed); err == nil && id == cur {
					continue
				}
				secret, err := s.secretOf(name, u)
				if err != nil {
					return 0, nil, err // nothing changed yet
				}
				u.SecretKey, u.Sealed = "", s.Cfg.KEK.Seal([]byte(secret), state.UserAD(name))
				if resealed[name] = u; len(resealed) == resealBatch {
					break
				}
			}
			if len(resealed) == 0 {
				return 0, nil, nil
			}
			b := s.Store.NewBatch()
			for name, u := range resealed {
				state.Set(b, state.UserKey(name), u.Encode())
				s.S3.Users[name] = u
			}
			n := len(resealed)
			return n, b, nil
		})
		total += n
		if err != nil || n < resealBatch {
			return total, err
		}
	}
}

// CreateS3Bucket creates an empty bucket owned by req.Owner with its ACL
// document and object ownership (ErrExists if it exists).
func (s *S3Users) CreateS3Bucket(name string, req *s3permapi.CreateBucket) (*metaapi.Bucket, error) {
	if err := metaapi.ValidBucket(name); err != nil {
		return nil, err
	}
	if req.Owner == "" || len(req.Owner) > metaapi.MaxAccessKeyBytes || len(req.ACL) > metaapi.MaxACLBytes || len(req.Ownership) > s3permapi.MaxOwnershipBytes {
		return nil, fmt.Errorf("%w: bucket %s: owner of 1..%d bytes, ACL of at most %d bytes, ownership of at most %d", metaapi.ErrInvalid, name,
			metaapi.MaxAccessKeyBytes, metaapi.MaxACLBytes, s3permapi.MaxOwnershipBytes)
	}
	return state.Mutate(s.State, func() (*metaapi.Bucket, *pebble.Batch, error) {
		if _, ok := s.Buckets[name]; ok {
			return nil, nil, fmt.Errorf("%w: bucket %s", metaapi.ErrExists, name)
		}
		rec := state.BucketRecord{Created: s.Cfg.Now(), Owner: req.Owner, ACL: string(req.ACL), Ownership: req.Ownership}
		b := s.Store.NewBatch()
		state.Set(b, state.BucketKey(name), rec.Encode())
		s.Buckets[name] = rec
		v := bucketView(name, rec)
		v.ACL = []byte(rec.ACL)
		return v, b, nil
	})
}

// GetBucket returns a bucket with its owner and ACL document.
func (s *S3Users) GetBucket(name string) (*metaapi.Bucket, error) {
	if err := metaapi.ValidBucket(name); err != nil {
		return nil, err
	}
	return state.Read(s.State, func() (*metaapi.Bucket, error) {
		rec, ok := s.Buckets[name]
		if !ok {
			return nil, fmt.Errorf("%w %s", metaapi.ErrNoSuchBucket, name)
		}
		v := bucketView(name, rec)
		if rec.ACL != "" {
			v.ACL = []byte(rec.ACL)
		}
		return v, nil
	})
}

// PutBucketACL replaces a bucket's ACL document.
func (s *S3Users) PutBucketACL(name string, acl []byte) error {
	if err := metaapi.ValidBucket(name); err != nil {
		return err
	}
	if len(acl) > metaapi.MaxACLBytes {
		return fmt.Errorf("%w: ACL of %d bytes, at most %d", metaapi.ErrInvalid, len(acl), metaapi.MaxACLBytes)
	}
	_, err := state.Mutate(s.State, func() (struct{}, *pebble.Batch, error) {
		rec, ok := s.Buckets[name]
		if !ok {
			return struct{}{}, nil, fmt.Errorf("%w %s", metaapi.ErrNoSuchBucket, name)
		}
		rec.ACL = string(acl)
		b := s.Store.NewBatch()
		state.Set(b, state.BucketKey(name), rec.Encode())
		s.Buckets[name] = rec
		return struct{}{}, b, nil
	})
	return err
}

// S3Users holds the S3 users.
type S3Users struct{ *state.State }

// NewS3Users is the S3 users over st.
func NewS3Users(st *state.State) *S3Users { return &S3Users{st} }
