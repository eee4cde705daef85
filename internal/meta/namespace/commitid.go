package namespace

// Commit IDs: a CommitKey may carry a client-chosen ID (metaapi.CommitKey
// CommitID; metaapi.Client sets a random one and sends the same on every
// retry of the call). The commit's batch records the ID with the version
// it committed, so that a commit retried after its outcome became unknown
// (a failover, a lost answer) and refused on the usual path (its blocks
// consumed, or its conditions no longer met: the ID is looked up only
// then) is answered with the first commit's result,
// committed once, even when the key was replaced or deleted in between
// (without the ID the retry finds its blocks consumed and is refused as
// INVALID although it committed). The records are replicated state like
// the key itself (a new leader answers the retry), and the serving leader's
// Tick deletes those older than CommitIDRetention, at most
// maxCommitIDExpiriesPerTick per tick.
//
// Records (0x00 sorts before every record prefix: scans never see them):
//
//	"\x00cid/" + ID                          → created u64 BE (unix ns) | bucket len u16 | bucket | key len u16 | key | keyRecord
//	"\x00cidx/" + created u64 BE + ID        → empty (the expiry index)

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// CommitIDRetention is how long a commit ID is remembered: far longer than
// a client retries one call (metaapi.DefaultFailoverTimeout).
const CommitIDRetention = 10 * time.Minute

// maxCommitIDExpiriesPerTick bounds the commit IDs one Tick forgets.
const maxCommitIDExpiriesPerTick = 10000

var (
	commitIDPrefix    = []byte("\x00cid/")
	commitIDExpPrefix = []byte("\x00cidx/")
)

func CommitIDKey(id string) []byte { return append(bytes.Clone(commitIDPrefix), id...) }

func commitIDExpKey(created time.Time, id string) []byte {
	k := binary.BigEndian.AppendUint64(bytes.Clone(commitIDExpPrefix), uint64(created.UnixNano()))
	return append(k, id...)
}

// recordCommitID adds, to a commit's batch, that commit id made rec the
// version of bucket/key.
func recordCommitID(b *pebble.Batch, id, bucket, key string, rec state.KeyRecord) {
	v := binary.BigEndian.AppendUint64(nil, uint64(rec.Created.UnixNano()))
	v = binary.LittleEndian.AppendUint16(v, uint16(len(bucket)))
	v = append(v, bucket...)
	v = binary.LittleEndian.AppendUint16(v, uint16(len(key)))
	v = append(v, key...)
	v = append(v, rec.Encode()...)
	state.Set(b, CommitIDKey(id), v)
	state.Set(b, commitIDExpKey(rec.Created, id), nil)
}

// committedByID returns the version commit id made (found false: no
// commit with that ID is remembered). Under s.mu.
func (s *Namespace) committedByID(id, bucket, key string) (_ state.KeyRecord, _ bool, err error) {
	v, closer, err := s.Store.Get(CommitIDKey(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return state.KeyRecord{}, false, nil
	}
	if err != nil {
		return state.KeyRecord{}, false, err
	}
	defer state.CloseInto(closer, &err, "read commit ID record")
	bad := fmt.Errorf("%w: commit ID record %q", state.ErrCorrupt, id)
	if len(v) < 8+2 {
		return state.KeyRecord{}, false, bad
	}
	p := v[8:]
	var names [2]string
	for i := range names {
		if len(p) < 2 || len(p) < 2+int(binary.LittleEndian.Uint16(p)) {
			return state.KeyRecord{}, false, bad
		}
		n := int(binary.LittleEndian.Uint16(p))
		names[i], p = string(p[2:2+n]), p[2+n:]
	}
	if names[0] != bucket || names[1] != key {
		return state.KeyRecord{}, false, fmt.Errorf("%w: commit ID %q was used for %s/%s, not %s/%s", metaapi.ErrInvalid, id, names[0], names[1], bucket, key)
	}
	rec, err := state.DecodeKey(p)
	if err != nil {
		return state.KeyRecord{}, false, err
	}
	return rec, true, nil
}

// retriedCommit answers a commit refused with err: a retry of a commit
// that took effect (its blocks consumed, or its conditions no longer met
// because of itself) is answered with what it committed; anything else
// gets err. The lookup is only made on this path: a first try, the usual
// case, costs no read. Under s.mu.
func (s *Namespace) retriedCommit(bucket, key string, ck *metaapi.CommitKey, now time.Time, err error) (*metaapi.KeyInfo, *pebble.Batch, error) {
	if ck.CommitID == "" {
		return nil, nil, err
	}
	rec, found, lerr := s.committedByID(ck.CommitID, bucket, key)
	if lerr != nil {
		return nil, nil, lerr
	}
	if !found {
		return nil, nil, err
	}
	return s.keyInfo(bucket, key, rec, now), nil, nil
}

// expireCommitIDs forgets, in b, the commit IDs older than
// CommitIDRetention (the oldest first, at most maxCommitIDExpiriesPerTick).
// Under s.mu, from Tick.
func (s *Namespace) ExpireCommitIDs(b *pebble.Batch, now time.Time) (err error) {
	upper := binary.BigEndian.AppendUint64(bytes.Clone(commitIDExpPrefix), uint64(now.Add(-CommitIDRetention).UnixNano()))
	it, err := s.Store.NewIter(&pebble.IterOptions{LowerBound: commitIDExpPrefix, UpperBound: upper})
	if err != nil {
		return err
	}
	defer state.CloseInto(it, &err, "commit ID expiries")
	n := 0
	for ok := it.First(); ok && n < maxCommitIDExpiriesPerTick; ok = it.Next() {
		k := it.Key()
		if len(k) < len(commitIDExpPrefix)+8 {
			continue
		}
		state.Del(b, bytes.Clone(k))
		state.Del(b, CommitIDKey(string(k[len(commitIDExpPrefix)+8:])))
		n++
	}
	return it.Error()
}
