package namespace

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/meta/holdmeta"
	"github.com/spindle-store/spindle/internal/meta/lockmeta"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/meta/state/verrec"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/versionapi"
)

// S3 object lock (issue 35 item 2): the state behind package lockmeta's
// rules (its comment has the layout and the invariants). Functions named
// in lower case run under s.Mu, inside their caller's Mutate or Read.

// lockConfig reads a bucket's object lock configuration (zero: none).
func (s Versions) lockConfig(bucket string) (_ lockmeta.Config, err error) {
	v, closer, err := s.Store.Get(state.BucketConfKey(bucket, lockmeta.ConfName))
	if errors.Is(err, pebble.ErrNotFound) {
		return lockmeta.Config{}, nil
	}
	if err != nil {
		return lockmeta.Config{}, fmt.Errorf("meta: object lock of bucket %s: %w", bucket, err)
	}
	defer state.CloseInto(closer, &err, "object lock configuration")
	rec, err := state.DecodeBucketConf(v)
	if err != nil {
		return lockmeta.Config{}, fmt.Errorf("meta: object lock of bucket %s: %w", bucket, err)
	}
	c, err := lockmeta.ParseConfig([]byte(rec.Doc))
	if err != nil {
		return c, fmt.Errorf("%w: bucket %s: %v", state.ErrCorrupt, bucket, err)
	}
	return c, nil
}

// lockOnWrite gives a new version of a key in brec's bucket its lock
// (lockmeta.OnWrite): lock headers are taken only where the bucket's lock
// is enabled (which needs versioning Enabled).
func (s Versions) lockOnWrite(brec *state.BucketRecord, bucket string, rec *state.KeyRecord, now time.Time) error {
	var c lockmeta.Config
	if brec.Versioning == verrec.Enabled {
		var err error
		if c, err = s.lockConfig(bucket); err != nil {
			return err
		}
	}
	om, err := lockmeta.OnWrite(c, rec.Object, now)
	if err != nil {
		return err
	}
	rec.Object = om
	return nil
}

// holdOnWrite writes, in b, the holds the datanodes keep for the blocks
// of rec, a new version, when its lock is in force (package holdmeta).
func holdOnWrite(b *pebble.Batch, rec *state.KeyRecord, now time.Time) {
	if l, err := lockmeta.Of(rec.Object); err == nil {
		holdmeta.OnLock(b, rec.Blocks, lockmeta.Lock{}, l, now)
	}
}

// PutLockConfig sets a bucket's object lock configuration. Enabling it
// needs the bucket's versioning Enabled, or (create: the bucket was just
// created with object lock) never set, which it then enables in the same
// batch; once enabled it stays so, and versioning may not be suspended.
func (s Versions) PutLockConfig(bucket string, c lockmeta.Config, create bool) error {
	if err := c.Validate(); err != nil {
		return err
	}
	doc, err := json.Marshal(c)
	if err != nil {
		return err
	}
	_, err = state.Mutate(s.State, func() (struct{}, *pebble.Batch, error) {
		brec, ok := s.Buckets[bucket]
		if !ok {
			return struct{}{}, nil, fmt.Errorf("%w %s", metaapi.ErrNoSuchBucket, bucket)
		}
		old, err := s.lockConfig(bucket)
		if err != nil {
			return struct{}{}, nil, err
		}
		if !old.Enabled && brec.Versioning != verrec.Enabled && !(create && brec.Versioning == verrec.Unversioned) {
			return struct{}{}, nil, fmt.Errorf("%w: object lock on bucket %s needs its versioning Enabled", metaapi.ErrPrecondition, bucket)
		}
		b := s.Store.NewBatch()
		if brec.Versioning != verrec.Enabled {
			brec.Versioning = verrec.Enabled
			state.Set(b, state.BucketKey(bucket), brec.Encode())
			s.Buckets[bucket] = brec
		}
		state.Set(b, state.BucketConfKey(bucket, lockmeta.ConfName), state.BucketConfRecord{Updated: s.Cfg.Now(), Doc: string(doc)}.Encode())
		return struct{}{}, b, nil
	})
	return err
}

// LockConfig reads a bucket's object lock configuration (Enabled false:
// none).
func (s Versions) LockConfig(bucket string) (lockmeta.Config, error) {
	return state.Read(s.State, func() (lockmeta.Config, error) {
		if _, ok := s.Buckets[bucket]; !ok {
			return lockmeta.Config{}, fmt.Errorf("%w %s", metaapi.ErrNoSuchBucket, bucket)
		}
		return s.lockConfig(bucket)
	})
}

// lockedBucket refuses a versioning change to Suspended on a bucket with
// object lock.
func (s Versions) lockedBucket(bucket string, st uint8) error {
	if st != verrec.Suspended {
		return nil
	}
	c, err := s.lockConfig(bucket)
	if err == nil && c.Enabled {
		err = fmt.Errorf("%w: bucket %s has object lock: its versioning cannot be suspended", metaapi.ErrPrecondition, bucket)
	}
	return err
}

// lockedVersion finds the version ref names for a lock read or change:
// not a delete marker, in a bucket with object lock.
func (s Versions) lockedVersion(ref versionapi.Ref) (storedVersion, error) {
	if _, err := s.BucketOf(ref.Bucket, ref.Key); err != nil {
		return storedVersion{}, err
	}
	cur, exists, err := s.getKey(ref.Bucket, ref.Key)
	if err != nil {
		return storedVersion{}, err
	}
	var v storedVersion
	found := exists && ref.VersionID == ""
	if found {
		v = storedVersion{rec: cur}
	} else if ref.VersionID != "" {
		if v, found, err = s.findVersion(ref.Bucket, ref.Key, cur, exists, ref.VersionID); err != nil {
			return v, err
		}
	}
	if !found && ref.VersionID != "" && !exists { // a key with versions but not this one: no such version
		older, err := s.olderVersions(ref.Bucket, ref.Key, 1)
		if err != nil {
			return v, err
		}
		exists = len(older) > 0
	}
	if !found && exists {
		return v, fmt.Errorf("%w: no version %s of %s/%s", metaapi.ErrNotFound, ref.VersionID, ref.Bucket, ref.Key)
	}
	if !found {
		return v, fmt.Errorf("%w %s/%s (version %q)", metaapi.ErrNoSuchKey, ref.Bucket, ref.Key, ref.VersionID)
	}
	if c, err := s.lockConfig(ref.Bucket); err != nil || !c.Enabled {
		return v, cmp.Or(err, fmt.Errorf("%w: bucket %s has no object lock configuration", metaapi.ErrPrecondition, ref.Bucket))
	}
	if v.rec.Version.Marker {
		return v, fmt.Errorf("%w: version %s of %s/%s %s", metaapi.ErrInvalid, ref.VersionID, ref.Bucket, ref.Key, versionapi.DeleteMarkerText)
	}
	return v, nil
}

// GetLock reads a version's lock (VersionID "": the current version's).
func (s Versions) GetLock(ref versionapi.Ref) (lockmeta.Lock, error) {
	return state.Read(s.State, func() (lockmeta.Lock, error) {
		v, err := s.lockedVersion(ref)
		if err != nil {
			return lockmeta.Lock{}, err
		}
		return lockmeta.Of(v.rec.Object)
	})
}

// SetLock changes a version's lock to what change makes of it (change
// decides, with lockmeta's rules, and may refuse), in its record.
func (s Versions) SetLock(ref versionapi.Ref, change func(old lockmeta.Lock) (lockmeta.Lock, error)) error {
	_, err := state.Mutate(s.State, func() (struct{}, *pebble.Batch, error) {
		v, err := s.lockedVersion(ref)
		if err != nil {
			return struct{}{}, nil, err
		}
		old, err := lockmeta.Of(v.rec.Object)
		if err != nil {
			return struct{}{}, nil, err
		}
		next, err := change(old)
		if err != nil {
			return struct{}{}, nil, err
		}
		v.rec.Object = next.Into(v.rec.Object)
		skey := v.skey
		if skey == nil {
			skey = state.ObjectKey(ref.Bucket, ref.Key)
		}
		b := s.Store.NewBatch()
		state.Set(b, skey, v.rec.Encode())
		holdmeta.OnLock(b, v.rec.Blocks, old, next, s.Cfg.Now()) // the datanodes' holds
		return struct{}{}, b, nil
	})
	return err
}
