package meta

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"maps"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// S3 users and bucket owners (the S3 gateway's identities). Users are
// records 'U'|name, all held in memory (s.s3) and indexed by access key;
// every change goes through mutate (commit.go), like every other record.

// s3State is the S3 part of the service's memory, under s.mu.
type s3State struct {
	users    map[string]userRecord // by name
	byAccess map[string]string     // access key → name
}

func (s *Service) loadS3() error {
	s.s3 = s3State{users: map[string]userRecord{}, byAccess: map[string]string{}}
	return s.scan(prefixUser, func(k, v []byte) error {
		rec, err := decodeUser(v)
		if err != nil {
			return fmt.Errorf("user %q: %w", k[1:], err)
		}
		name := string(k[1:])
		if _, dup := s.s3.byAccess[rec.AccessKey]; dup {
			return fmt.Errorf("%w: user %q: access key held by another user", ErrCorrupt, name)
		}
		s.s3.users[name] = rec
		s.s3.byAccess[rec.AccessKey] = name
		return nil
	})
}

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

// validAccessKey: 16..MaxAccessKeyBytes of upper-case letters and digits
// (AWS's form); a secret 16..MaxSecretKeyBytes printable ASCII characters.
func validKeys(access, secret string) error {
	if len(access) < 16 || len(access) > metaapi.MaxAccessKeyBytes {
		return fmt.Errorf("%w: access key: want 16..%d characters", metaapi.ErrInvalid, metaapi.MaxAccessKeyBytes)
	}
	for _, c := range []byte(access) {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return fmt.Errorf("%w: access key %q: only A-Z and 0-9", metaapi.ErrInvalid, access)
		}
	}
	if len(secret) < 16 || len(secret) > metaapi.MaxSecretKeyBytes {
		return fmt.Errorf("%w: secret key: want 16..%d characters", metaapi.ErrInvalid, metaapi.MaxSecretKeyBytes)
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
func (s *Service) CreateUser(req *metaapi.CreateUser) (*metaapi.User, error) {
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
	return mutate(s, func() (*metaapi.User, *pebble.Batch, error) {
		if _, ok := s.s3.users[req.Name]; ok {
			return nil, nil, fmt.Errorf("%w: user %s", metaapi.ErrExists, req.Name)
		}
		if other, ok := s.s3.byAccess[access]; ok {
			return nil, nil, fmt.Errorf("%w: access key %s belongs to user %s", metaapi.ErrExists, access, other)
		}
		rec := userRecord{Created: s.cfg.Now(), AccessKey: access, SecretKey: secret}
		b := s.db.NewBatch()
		set(b, userKey(req.Name), rec.encode())
		s.s3.users[req.Name] = rec
		s.s3.byAccess[access] = req.Name
		return &metaapi.User{Name: req.Name, AccessKey: access, SecretKey: secret, Created: rec.Created}, b, nil
	})
}

// Users lists the users by name, without secrets.
func (s *Service) Users() (*metaapi.UserList, error) {
	return read(s, func() (*metaapi.UserList, error) {
		l := &metaapi.UserList{Users: []metaapi.User{}}
		for _, name := range slices.Sorted(maps.Keys(s.s3.users)) {
			u := s.s3.users[name]
			l.Users = append(l.Users, metaapi.User{Name: name, AccessKey: u.AccessKey, Created: u.Created})
		}
		return l, nil
	})
}

// DeleteUser deletes a user (its buckets keep their owner's access key).
func (s *Service) DeleteUser(name string) error {
	_, err := mutate(s, func() (struct{}, *pebble.Batch, error) {
		u, ok := s.s3.users[name]
		if !ok {
			return struct{}{}, nil, fmt.Errorf("%w: user %s", metaapi.ErrNotFound, name)
		}
		b := s.db.NewBatch()
		del(b, userKey(name))
		delete(s.s3.users, name)
		delete(s.s3.byAccess, u.AccessKey)
		return struct{}{}, b, nil
	})
	return err
}

// UserByAccessKey returns the user of an access key, with its secret.
func (s *Service) UserByAccessKey(access string) (*metaapi.User, error) {
	return read(s, func() (*metaapi.User, error) {
		name, ok := s.s3.byAccess[access]
		if !ok {
			return nil, fmt.Errorf("%w: access key %s", metaapi.ErrNotFound, access)
		}
		u := s.s3.users[name]
		return &metaapi.User{Name: name, AccessKey: u.AccessKey, SecretKey: u.SecretKey, Created: u.Created}, nil
	})
}

// CreateS3Bucket creates an empty bucket owned by req.Owner with its ACL
// document (ErrExists if it exists).
func (s *Service) CreateS3Bucket(name string, req *metaapi.CreateS3Bucket) (*metaapi.Bucket, error) {
	if err := metaapi.ValidBucket(name); err != nil {
		return nil, err
	}
	if req.Owner == "" || len(req.Owner) > metaapi.MaxAccessKeyBytes || len(req.ACL) > metaapi.MaxACLBytes {
		return nil, fmt.Errorf("%w: bucket %s: owner of 1..%d bytes and ACL of at most %d bytes", metaapi.ErrInvalid, name, metaapi.MaxAccessKeyBytes, metaapi.MaxACLBytes)
	}
	return mutate(s, func() (*metaapi.Bucket, *pebble.Batch, error) {
		if _, ok := s.buckets[name]; ok {
			return nil, nil, fmt.Errorf("%w: bucket %s", metaapi.ErrExists, name)
		}
		rec := bucketRecord{Created: s.cfg.Now(), Owner: req.Owner, ACL: string(req.ACL)}
		b := s.db.NewBatch()
		set(b, bucketKey(name), rec.encode())
		s.buckets[name] = rec
		v := bucketView(name, rec)
		v.ACL = []byte(rec.ACL)
		return v, b, nil
	})
}

// GetBucket returns a bucket with its owner and ACL document.
func (s *Service) GetBucket(name string) (*metaapi.Bucket, error) {
	if err := metaapi.ValidBucket(name); err != nil {
		return nil, err
	}
	return read(s, func() (*metaapi.Bucket, error) {
		rec, ok := s.buckets[name]
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
func (s *Service) PutBucketACL(name string, acl []byte) error {
	if err := metaapi.ValidBucket(name); err != nil {
		return err
	}
	if len(acl) > metaapi.MaxACLBytes {
		return fmt.Errorf("%w: ACL of %d bytes, at most %d", metaapi.ErrInvalid, len(acl), metaapi.MaxACLBytes)
	}
	_, err := mutate(s, func() (struct{}, *pebble.Batch, error) {
		rec, ok := s.buckets[name]
		if !ok {
			return struct{}{}, nil, fmt.Errorf("%w %s", metaapi.ErrNoSuchBucket, name)
		}
		rec.ACL = string(acl)
		b := s.db.NewBatch()
		set(b, bucketKey(name), rec.encode())
		s.buckets[name] = rec
		return struct{}{}, b, nil
	})
	return err
}
