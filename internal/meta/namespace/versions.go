package namespace

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/meta/lockmeta"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/meta/state/verrec"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/versionapi"
)

// S3 object versions (issue 35; layout and invariants: package verrec).
// Every function here runs under s.Mu (a Mutate or Read of its caller's),
// reads the store as it was before the batch it fills (a batch does not
// see its own writes) and changes the bucket record it is given, which
// its caller writes.

// Versions is the namespace's S3 object versions (a type of its own:
// Namespace's method set stays small).
type Versions struct{ *Namespace }

// storedVersion is a version read from the 'V' range, with its store key.
type storedVersion struct {
	rec  state.KeyRecord
	skey []byte
}

func isNull(v verrec.Version) bool { return v.Null || v.ID == 0 }

// olderVersions returns up to n (n < 0: all) of a key's noncurrent
// versions, newest first.
func (s Versions) olderVersions(bucket, key string, n int) (_ []storedVersion, err error) {
	p := verrec.VersionsOf(bucket, key)
	it, err := s.Store.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: state.PrefixEnd(p)})
	if err != nil {
		return nil, err
	}
	defer state.CloseInto(it, &err, "versions of "+bucket+"/"+key)
	var out []storedVersion
	for ok := it.First(); ok && (n < 0 || len(out) < n); ok = it.Next() {
		rec, err := state.DecodeKey(it.Value())
		if err != nil {
			return nil, fmt.Errorf("meta: version of %s/%s: %w", bucket, key, err)
		}
		out = append(out, storedVersion{rec: rec, skey: bytes.Clone(it.Key())})
	}
	return out, it.Error()
}

// newVersionID is the ID of a key's next version: now in ns, or one more
// than its newest version's (a clock that went back, a leader's that is
// behind), so that a key's IDs grow.
func (s Versions) newVersionID(bucket, key string, cur state.KeyRecord, exists bool, now time.Time) (uint64, error) {
	newest := cur.Version.ID
	if !exists {
		vs, err := s.olderVersions(bucket, key, 1)
		if err != nil {
			return 0, err
		}
		if len(vs) > 0 {
			newest = vs[0].rec.Version.ID
		}
	}
	return max(uint64(now.UnixNano()), newest+1), nil
}

// forget drops a version for good: its blocks to the GC, its bytes from
// the bucket's; never a locked version's (lockmeta.CheckRemove: o is the
// request's standing against a GOVERNANCE retention).
func (s Versions) forget(b *pebble.Batch, brec *state.BucketRecord, rec state.KeyRecord, reason uint8, now time.Time, o lockmeta.Override) error {
	if err := lockmeta.CheckRemoveMeta(rec.Object, now, o); err != nil {
		return err
	}
	if l, err := lockmeta.Of(rec.Object); err == nil { // (parsed: CheckRemoveMeta passed)
		s.gc.Holds.Forget(b, rec.Blocks, l, now) // the datanodes' holds
	}
	for _, sb := range rec.Blocks {
		s.gc.ScheduleDelete(b, state.BlockRef{Container: sb.Container, Local: sb.Local}, reason, now)
	}
	brec.Bytes -= rec.Size
	return nil
}

// dropNull drops the key's null version, current (cur, exists) or not,
// as a write or a delete in a Suspended bucket does; keep says whether
// the current version is to be kept (it is not the null one).
func (s Versions) dropNull(b *pebble.Batch, brec *state.BucketRecord, bucket, key string, cur state.KeyRecord, exists bool, now time.Time) (keep bool, err error) {
	if exists && isNull(cur.Version) {
		return false, s.forget(b, brec, cur, state.ReasonReplaced, now, lockmeta.Override{})
	}
	vs, err := s.olderVersions(bucket, key, -1)
	if err != nil {
		return false, err
	}
	for _, v := range vs {
		if isNull(v.rec.Version) {
			state.Del(b, v.skey)
			return exists, s.forget(b, brec, v.rec, state.ReasonReplaced, now, lockmeta.Override{})
		}
	}
	return exists, nil
}

// placeVersion writes rec as bucket/key's new current version in b, cur
// (exists) being the current one: in a bucket never versioned it replaces
// cur (whose blocks go); else rec gets a version ID and cur becomes a
// noncurrent version (unless both are the null version of a Suspended
// bucket). brec's counts follow; the caller writes brec.
func (s Versions) placeVersion(b *pebble.Batch, brec *state.BucketRecord, bucket, key string, cur state.KeyRecord, exists bool, rec *state.KeyRecord, now time.Time) error {
	keep := exists
	if err := s.lockOnWrite(brec, bucket, rec, now); err != nil { // objlock.go
		return err
	}
	holdOnWrite(b, rec, now) // objlock.go
	if brec.Versioning != verrec.Unversioned {
		id, err := s.newVersionID(bucket, key, cur, exists, now)
		if err != nil {
			return err
		}
		rec.Version = verrec.Version{ID: id, Null: brec.Versioning == verrec.Suspended}
		if rec.Version.Null {
			if keep, err = s.dropNull(b, brec, bucket, key, cur, exists, now); err != nil {
				return err
			}
		}
		if keep {
			state.Set(b, verrec.Key(bucket, key, cur.Version.ID), cur.Encode())
		}
	} else if exists {
		if err := s.forget(b, brec, cur, state.ReasonReplaced, now, lockmeta.Override{}); err != nil {
			return err
		}
	}
	if !exists {
		brec.Keys++
	}
	brec.Bytes += rec.Size
	state.Set(b, state.ObjectKey(bucket, key), rec.Encode())
	return nil
}

// SetVersioning sets a bucket's versioning state (versionapi.Enabled or
// Suspended).
func (s Versions) SetVersioning(bucket, status string) error {
	var st uint8
	switch status {
	case versionapi.Enabled:
		st = verrec.Enabled
	case versionapi.Suspended:
		st = verrec.Suspended
	default:
		return fmt.Errorf("%w: versioning status %q: want Enabled or Suspended", metaapi.ErrInvalid, status)
	}
	_, err := state.Mutate(s.State, func() (struct{}, *pebble.Batch, error) {
		brec, ok := s.Buckets[bucket]
		if !ok {
			return struct{}{}, nil, fmt.Errorf("%w %s", metaapi.ErrNoSuchBucket, bucket)
		}
		if brec.Versioning == st {
			return struct{}{}, nil, nil
		}
		if err := s.lockedBucket(bucket, st); err != nil { // objlock.go
			return struct{}{}, nil, err
		}
		brec.Versioning = st
		b := s.Store.NewBatch()
		state.Set(b, state.BucketKey(bucket), brec.Encode())
		s.Buckets[bucket] = brec
		return struct{}{}, b, nil
	})
	return err
}

// Versioning reads a bucket's versioning state ("" never versioned).
func (s Versions) Versioning(bucket string) (string, error) {
	return state.Read(s.State, func() (string, error) {
		brec, ok := s.Buckets[bucket]
		if !ok {
			return "", fmt.Errorf("%w %s", metaapi.ErrNoSuchBucket, bucket)
		}
		return verrec.StatusName(brec.Versioning), nil
	})
}

// findVersion finds a version of a key by its ID: the current one
// (skey nil) or a noncurrent one.
func (s Versions) findVersion(bucket, key string, cur state.KeyRecord, exists bool, vid string) (v storedVersion, found bool, err error) {
	id, null, err := verrec.ParseID(vid)
	if errors.Is(err, verrec.ErrForeignID) {
		return v, false, nil
	}
	if err != nil {
		return v, false, fmt.Errorf("%w: %v", metaapi.ErrInvalid, err)
	}
	match := func(x verrec.Version) bool { return null && isNull(x) || !null && !x.Null && x.ID == id }
	if exists && match(cur.Version) {
		return storedVersion{rec: cur}, true, nil
	}
	if null {
		vs, err := s.olderVersions(bucket, key, -1)
		if err != nil {
			return v, false, err
		}
		for _, x := range vs {
			if isNull(x.rec.Version) {
				return x, true, nil
			}
		}
		return v, false, nil
	}
	skey := verrec.Key(bucket, key, id)
	val, closer, err := s.Store.Get(skey)
	if errors.Is(err, pebble.ErrNotFound) {
		return v, false, nil
	}
	if err != nil {
		return v, false, err
	}
	defer state.CloseInto(closer, &err, "read version")
	rec, err := state.DecodeKey(val)
	if err != nil || !match(rec.Version) {
		return v, false, fmt.Errorf("%w: version %s of %s/%s: %v", state.ErrCorrupt, vid, bucket, key, err)
	}
	return storedVersion{rec: rec, skey: skey}, true, nil
}

// GetVersion returns one version of a key (VersionID "": the current
// one), with its blocks and their replicas.
func (s Versions) GetVersion(ref versionapi.Ref) (*versionapi.Version, error) {
	return state.Read(s.State, func() (*versionapi.Version, error) {
		if _, err := s.BucketOf(ref.Bucket, ref.Key); err != nil {
			return nil, err
		}
		cur, exists, err := s.getKey(ref.Bucket, ref.Key)
		if err != nil {
			return nil, err
		}
		if ref.VersionID == "" {
			if !exists {
				return nil, fmt.Errorf("%w %s/%s", metaapi.ErrNoSuchKey, ref.Bucket, ref.Key)
			}
			return s.version(ref.Bucket, ref.Key, cur, true), nil
		}
		v, found, err := s.findVersion(ref.Bucket, ref.Key, cur, exists, ref.VersionID)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("%w: no version %s of %s/%s", metaapi.ErrNotFound, ref.VersionID, ref.Bucket, ref.Key)
		}
		latest := v.skey == nil
		if !exists && !latest {
			newest, err := s.olderVersions(ref.Bucket, ref.Key, 1)
			if err != nil {
				return nil, err
			}
			latest = len(newest) > 0 && bytes.Equal(newest[0].skey, v.skey)
		}
		return s.version(ref.Bucket, ref.Key, v.rec, latest), nil
	})
}

func (s Versions) version(bucket, key string, rec state.KeyRecord, latest bool) *versionapi.Version {
	ki := s.keyInfo(bucket, key, rec, s.Cfg.Now())
	ki.VersionID = rec.Version.String()
	return &versionapi.Version{KeyInfo: *ki, DeleteMarker: rec.Version.Marker, IsLatest: latest}
}

// DeleteVersion deletes as S3's DeleteObject (versionapi's package
// comment): without a version ID, in a versioned bucket, it makes a
// delete marker; with one, it removes that version (a version that does
// not exist is no error, as in S3).
func (s Versions) DeleteVersion(ref versionapi.Ref) (*versionapi.Deleted, error) {
	return s.DeleteVersionAs(ref, lockmeta.Override{})
}

// DeleteVersionAs is DeleteVersion with o the request's standing against a
// GOVERNANCE retention of the version it removes (lockmeta.Override).
func (s Versions) DeleteVersionAs(ref versionapi.Ref, o lockmeta.Override) (*versionapi.Deleted, error) {
	return state.Mutate(s.State, func() (*versionapi.Deleted, *pebble.Batch, error) {
		brec, err := s.BucketOf(ref.Bucket, ref.Key)
		if err != nil {
			return nil, nil, err
		}
		cur, exists, err := s.getKey(ref.Bucket, ref.Key)
		if err != nil {
			return nil, nil, err
		}
		now := s.Cfg.Now()
		b := s.Store.NewBatch()
		var d *versionapi.Deleted
		switch {
		case ref.VersionID != "":
			d, err = s.removeVersion(b, &brec, ref, cur, exists, now, o)
		case brec.Versioning == verrec.Unversioned:
			if !exists {
				err = fmt.Errorf("%w %s/%s", metaapi.ErrNoSuchKey, ref.Bucket, ref.Key)
				break
			}
			state.Del(b, state.ObjectKey(ref.Bucket, ref.Key))
			err = s.forget(b, &brec, cur, state.ReasonDeleted, now, o)
			brec.Keys--
			d = &versionapi.Deleted{}
		default:
			d, err = s.addMarker(b, &brec, ref.Bucket, ref.Key, cur, exists, now)
		}
		if err != nil || d == nil { // d nil: no such version, nothing to do
			state.CloseBatch(b)
			return &versionapi.Deleted{VersionID: ref.VersionID}, nil, err
		}
		state.Set(b, state.BucketKey(ref.Bucket), brec.Encode())
		s.Buckets[ref.Bucket] = brec
		return d, b, nil
	})
}

// addMarker makes a delete marker the key's newest version.
func (s Versions) addMarker(b *pebble.Batch, brec *state.BucketRecord, bucket, key string, cur state.KeyRecord, exists bool, now time.Time) (*versionapi.Deleted, error) {
	id, err := s.newVersionID(bucket, key, cur, exists, now)
	if err != nil {
		return nil, err
	}
	m := state.KeyRecord{Created: now, Version: verrec.Version{ID: id, Null: brec.Versioning == verrec.Suspended, Marker: true}}
	keep := exists
	if m.Version.Null {
		if keep, err = s.dropNull(b, brec, bucket, key, cur, exists, now); err != nil {
			return nil, err
		}
	}
	if keep {
		state.Set(b, verrec.Key(bucket, key, cur.Version.ID), cur.Encode())
	}
	if exists {
		state.Del(b, state.ObjectKey(bucket, key))
		brec.Keys--
	}
	state.Set(b, verrec.Key(bucket, key, id), m.Encode())
	return &versionapi.Deleted{VersionID: m.Version.String(), DeleteMarker: true}, nil
}

// removeVersion removes one version for good; when it was the newest, the
// next newest becomes current (unless it is a delete marker).
func (s Versions) removeVersion(b *pebble.Batch, brec *state.BucketRecord, ref versionapi.Ref, cur state.KeyRecord, exists bool, now time.Time, o lockmeta.Override) (*versionapi.Deleted, error) {
	v, found, err := s.findVersion(ref.Bucket, ref.Key, cur, exists, ref.VersionID)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, nil // nothing to do: S3 answers as if it was deleted
	}
	d := &versionapi.Deleted{VersionID: ref.VersionID, DeleteMarker: v.rec.Version.Marker}
	promote := false
	var older []storedVersion
	if v.skey == nil { // the current version
		state.Del(b, state.ObjectKey(ref.Bucket, ref.Key))
		brec.Keys--
		if older, err = s.olderVersions(ref.Bucket, ref.Key, 1); err != nil {
			return nil, err
		}
		promote = true
	} else {
		state.Del(b, v.skey)
		if !exists { // was it the newest (a delete marker)?
			if older, err = s.olderVersions(ref.Bucket, ref.Key, 2); err != nil {
				return nil, err
			}
			if promote = len(older) > 0 && bytes.Equal(older[0].skey, v.skey); promote {
				older = older[1:]
			}
		}
	}
	if err := s.forget(b, brec, v.rec, state.ReasonDeleted, now, o); err != nil {
		return nil, err
	}
	if promote && len(older) > 0 && !older[0].rec.Version.Marker {
		state.Del(b, older[0].skey)
		state.Set(b, state.ObjectKey(ref.Bucket, ref.Key), older[0].rec.Encode())
		brec.Keys++
	}
	return d, nil
}

// ListVersions returns a page of a bucket's versions (versionapi.List).
func (s Versions) ListVersions(bucket string, o versionapi.ListOptions) (*versionapi.List, error) {
	if err := metaapi.ValidBucket(bucket); err != nil {
		return nil, err
	}
	if o.Limit < 0 || o.Limit > metaapi.MaxListLimit {
		return nil, fmt.Errorf("%w: limit %d: want 1..%d", metaapi.ErrInvalid, o.Limit, metaapi.MaxListLimit)
	}
	if o.Limit == 0 {
		o.Limit = metaapi.MaxListLimit
	}
	if len(o.Prefix) > state.MaxKeyBytes || len(o.KeyMarker) > state.MaxKeyBytes || len(o.Delimiter) > state.MaxKeyBytes {
		return nil, fmt.Errorf("%w: prefix, delimiter or key marker longer than %d bytes", metaapi.ErrInvalid, state.MaxKeyBytes)
	}
	if o.VersionIDMarker != "" && o.KeyMarker == "" {
		return nil, fmt.Errorf("%w: a version ID marker without a key marker", metaapi.ErrInvalid)
	}
	return state.Read(s.State, func() (*versionapi.List, error) {
		if _, ok := s.Buckets[bucket]; !ok {
			return nil, fmt.Errorf("%w %s", metaapi.ErrNoSuchBucket, bucket)
		}
		return s.listVersionsLocked(bucket, o)
	})
}

// cursor is one of the two ranges a version listing merges.
type cursor struct {
	it     *pebble.Iterator
	p, lo  []byte // the range's prefix (bucket), its lower bound (prefix + listing prefix)
	ok     bool
	name   string
	isVers bool
}

func (c *cursor) seek(k []byte) {
	if k == nil {
		c.ok = false
	} else if bytes.Compare(k, c.lo) <= 0 {
		c.ok = c.it.First()
	} else {
		c.ok = c.it.SeekGE(k)
	}
	c.load()
}

func (c *cursor) next() { c.ok = c.it.Next(); c.load() }

func (c *cursor) load() {
	if !c.ok {
		return
	}
	if !c.isVers {
		c.name = string(c.it.Key()[len(c.p):])
		return
	}
	name, _, ok := verrec.Split(c.p, c.it.Key())
	if !ok {
		c.ok = false // not a version key: the store is checked at open; stop
		return
	}
	c.name = name
}

func (s Versions) openCursor(p []byte, prefix string, isVers bool) (*cursor, error) {
	lo := append(bytes.Clone(p), prefix...)
	hi := state.PrefixEnd(lo)
	it, err := s.Store.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, err
	}
	return &cursor{it: it, p: p, lo: lo, isVers: isVers}, nil
}

func (s Versions) listVersionsLocked(bucket string, o versionapi.ListOptions) (_ *versionapi.List, err error) {
	kc, err := s.openCursor(state.KeyPrefix(bucket), o.Prefix, false)
	if err != nil {
		return nil, fmt.Errorf("meta: list versions of %s: %w", bucket, err)
	}
	defer state.CloseInto(kc.it, &err, "list versions of "+bucket)
	vc, err := s.openCursor(verrec.KeyPrefix(bucket), o.Prefix, true)
	if err != nil {
		return nil, fmt.Errorf("meta: list versions of %s: %w", bucket, err)
	}
	defer state.CloseInto(vc.it, &err, "list versions of "+bucket)
	after := func(c *cursor, name string, tail ...byte) []byte {
		return append(append(bytes.Clone(c.p), name...), tail...)
	}
	switch {
	case o.KeyMarker == "":
		kc.seek(kc.lo)
		vc.seek(vc.lo)
	case o.VersionIDMarker == "":
		kc.seek(after(kc, o.KeyMarker, 0))
		vc.seek(after(vc, o.KeyMarker, 1))
	default:
		kc.seek(after(kc, o.KeyMarker, 0))
		cur, exists, err := s.getKey(bucket, o.KeyMarker)
		if err != nil {
			return nil, err
		}
		v, found, err := s.findVersion(bucket, o.KeyMarker, cur, exists, o.VersionIDMarker)
		switch {
		case err != nil:
			return nil, err
		case !found:
			vc.seek(after(vc, o.KeyMarker, 1))
		case v.skey == nil:
			vc.seek(after(vc, o.KeyMarker, 0))
		default:
			vc.seek(append(v.skey, 0))
		}
	}
	l := &versionapi.List{Versions: []versionapi.Version{}}
	lastName, lastID := "", ""
	full := func() bool {
		if len(l.Versions)+len(l.CommonPrefixes) < o.Limit {
			return false
		}
		l.Truncated, l.NextKeyMarker, l.NextVersionIDMarker = true, lastName, lastID
		return true
	}
	for kc.ok || vc.ok {
		c := kc
		if !kc.ok || vc.ok && vc.name < kc.name {
			c = vc
		}
		name := c.name
		if i := strings.Index(name[len(o.Prefix):], o.Delimiter); o.Delimiter != "" && i >= 0 {
			cp := name[:len(o.Prefix)+i+len(o.Delimiter)]
			if cp > o.KeyMarker {
				if full() {
					break
				}
				l.CommonPrefixes = append(l.CommonPrefixes, cp)
				lastName, lastID = cp, ""
			}
			kc.seek(state.PrefixEnd(after(kc, cp)))
			vc.seek(state.PrefixEnd(after(vc, cp)))
			continue
		}
		if full() {
			break
		}
		rec, err := state.DecodeKey(c.it.Value())
		if err != nil {
			return nil, fmt.Errorf("meta: version of %s/%s: %w", bucket, name, err)
		}
		if rec.Object != nil && rec.Object.PartSizes != nil {
			om := *rec.Object
			om.PartSizes, rec.Object = nil, &om
		}
		// The newest version of a key comes first: its current version,
		// or its newest noncurrent one when it has none (a delete
		// marker) and the page did not start inside the key.
		latest := c == kc || name != lastName && !(name == o.KeyMarker && o.VersionIDMarker != "")
		v := versionapi.Version{KeyInfo: metaapi.KeyInfo{Bucket: bucket, Key: name, Size: rec.Size, CRC32C: rec.CRC32C, Created: rec.Created,
			Object: rec.Object, VersionID: rec.Version.String()}, DeleteMarker: rec.Version.Marker, IsLatest: latest}
		l.Versions = append(l.Versions, v)
		lastName, lastID = name, v.VersionID
		c.next()
	}
	if err := cmp.Or(kc.it.Error(), vc.it.Error()); err != nil {
		return nil, fmt.Errorf("meta: list versions of %s: %w", bucket, err)
	}
	return l, nil
}
