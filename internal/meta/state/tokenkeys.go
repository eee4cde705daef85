package state

import (
	"fmt"
	"time"

	"github.com/spindle-store/spindle/internal/blocktoken"
)

// PrefixTokenKey: the block-token signing keys ('T' | key ID u64 BE),
// docs/FORMAT.md §13. The service keeps the newest two (package
// meta/tokenkeys rotates them).
const PrefixTokenKey = 'T'

// TokenKeyRecord is a block-token signing key: its ID is in the Pebble key.
type TokenKeyRecord struct {
	Created time.Time
	Secret  []byte
}

func (r TokenKeyRecord) Encode() []byte {
	e := newEnc()
	e.u64(ms(r.Created))
	e.str(string(r.Secret))
	return e.finish()
}

func DecodeTokenKey(v []byte) (TokenKeyRecord, error) {
	d := newDec("block token key", v)
	r := TokenKeyRecord{Created: d.tm(), Secret: []byte(d.str(blocktoken.SecretBytes))}
	if err := d.done(); err != nil {
		return r, err
	}
	if len(r.Secret) != blocktoken.SecretBytes {
		return r, fmt.Errorf("%w: block token key of %d bytes", ErrCorrupt, len(r.Secret))
	}
	return r, nil
}

// TokenKey is a signing key in memory, oldest first in State.TokenKeys.
type TokenKey struct {
	blocktoken.Key
	Created time.Time
}

// loadTokenKeys reads the block-token signing keys (called by load).
func (s *State) loadTokenKeys() error {
	s.TokenKeys = nil
	return s.Scan(PrefixTokenKey, func(k, v []byte) error {
		id, ok := parseU64Key(k)
		rec, err := DecodeTokenKey(v)
		if err != nil {
			return err
		}
		if !ok || id > uint64(^uint32(0)) {
			return fmt.Errorf("%w: block token key %x", ErrCorrupt, k)
		}
		s.TokenKeys = append(s.TokenKeys, TokenKey{Key: blocktoken.Key{ID: uint32(id), Secret: rec.Secret}, Created: rec.Created})
		return nil
	})
}
