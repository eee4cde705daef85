package namespace

import (
	"bytes"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/lifecycle"
	"github.com/spindle-store/spindle/internal/meta/lockmeta"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/meta/state/verrec"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/s3meta"
)

// S3 lifecycle (issue 35 item 3; the runner: package meta/lcmeta, the
// rules: package lifecycle). ScanLifecycle reads a bounded page of a
// bucket's keys with their versions under the read lock; ApplyLifecycle
// applies the planned actions in one Mutate (one replicated batch), each
// only if the versions it names are still as planned, so that an action
// planned before a concurrent write or delete of its key does nothing
// (the next run sees the key again).

// MaxLifecycleVersionsPerKey bounds the versions of one key a scan reads
// (the newest; older ones wait until these are removed), and those of a
// page (a page ends after the key that reaches it).
const MaxLifecycleVersionsPerKey = 1000

// ScanLifecycle returns up to limit keys of bucket after the key after
// ("": from the first), with their current and noncurrent versions, and
// whether the bucket has no keys past them.
func (s Versions) ScanLifecycle(bucket, after string, limit int) ([]lifecycle.KeyVersions, bool, error) {
	type page struct {
		keys []lifecycle.KeyVersions
		done bool
	}
	p, err := state.Read(s.State, func() (page, error) {
		keys, done, err := s.scanLifecycleLocked(bucket, after, limit)
		return page{keys, done}, err
	})
	return p.keys, p.done, err
}

// scanLifecycleLocked is ScanLifecycle under State.Mu (read).
func (s Versions) scanLifecycleLocked(bucket, after string, limit int) (_ []lifecycle.KeyVersions, done bool, err error) {
	if _, ok := s.Buckets[bucket]; !ok {
		return nil, true, fmt.Errorf("%w %s", metaapi.ErrNoSuchBucket, bucket)
	}
	kp, vp := state.KeyPrefix(bucket), verrec.KeyPrefix(bucket)
	klo, vlo := kp, vp
	if after != "" {
		klo = append(append(bytes.Clone(kp), after...), 0)
		vlo = state.PrefixEnd(verrec.VersionsOf(bucket, after))
	}
	kit, err := s.Store.NewIter(&pebble.IterOptions{LowerBound: klo, UpperBound: state.PrefixEnd(kp)})
	if err != nil {
		return nil, false, err
	}
	defer state.CloseInto(kit, &err, "lifecycle scan of "+bucket)
	vit, err := s.Store.NewIter(&pebble.IterOptions{LowerBound: vlo, UpperBound: state.PrefixEnd(vp)})
	if err != nil {
		return nil, false, err
	}
	defer state.CloseInto(vit, &err, "lifecycle scan of "+bucket)
	kok, vok := kit.First(), vit.First()
	vname := func() []byte {
		n, _, _ := bytes.Cut(vit.Key()[len(vp):], []byte{0})
		return n
	}
	var out []lifecycle.KeyVersions
	versions := 0
	for (kok || vok) && len(out) < limit {
		var name []byte
		switch {
		case !vok:
			name = kit.Key()[len(kp):]
		case !kok:
			name = vname()
		default:
			name = []byte(min(string(kit.Key()[len(kp):]), string(vname())))
		}
		kv := lifecycle.KeyVersions{Key: string(name)}
		if kok && string(kit.Key()[len(kp):]) == kv.Key {
			rec, err := state.DecodeKey(kit.Value())
			if err != nil {
				return nil, false, fmt.Errorf("meta: key %s/%s: %w", bucket, kv.Key, err)
			}
			v := lifecycleView(rec)
			kv.Current = &v
			kok = kit.Next()
		}
		for vok && string(vname()) == kv.Key {
			if len(kv.Older) == MaxLifecycleVersionsPerKey { // the rest: not read (the lock is held)
				vok = vit.SeekGE(state.PrefixEnd(verrec.VersionsOf(bucket, kv.Key)))
				break
			}
			rec, err := state.DecodeKey(vit.Value())
			if err != nil {
				return nil, false, fmt.Errorf("meta: version of %s/%s: %w", bucket, kv.Key, err)
			}
			kv.Older = append(kv.Older, lifecycleView(rec))
			vok = vit.Next()
		}
		out = append(out, kv)
		if versions += len(kv.Older); versions >= MaxLifecycleVersionsPerKey {
			break // a page reads at most about this many versions
		}
	}
	if err := kit.Error(); err != nil {
		return nil, false, err
	}
	return out, !kok && !vok, vit.Error()
}

func lifecycleView(rec state.KeyRecord) lifecycle.ObjectVersion {
	v := lifecycle.ObjectVersion{ID: rec.Version.String(), Marker: rec.Version.Marker, Created: rec.Created, Size: rec.Size}
	if rec.Object != nil && rec.Object.Headers[s3meta.TaggingHeader] != "" {
		v.Tags, _ = s3meta.DecodeTags(rec.Object.Headers[s3meta.TaggingHeader]) // unreadable tags: none
	}
	return v
}

// ApplyLifecycle applies acts (at most one for a key) to bucket's keys in
// one batch, and record (when not nil) adds what it did to the batch
// (the runner's status, so that its account and cursor change with the
// keys, atomically). Actions whose versions changed since they were
// planned are skipped.
func (s Versions) ApplyLifecycle(bucket string, acts []lifecycle.Action, record func(b *pebble.Batch, done lifecycle.Counts) error) (lifecycle.Counts, error) {
	return state.Mutate(s.State, func() (lifecycle.Counts, *pebble.Batch, error) {
		var c lifecycle.Counts
		brec, ok := s.Buckets[bucket]
		if !ok {
			return c, nil, fmt.Errorf("%w %s", metaapi.ErrNoSuchBucket, bucket)
		}
		now := s.Cfg.Now()
		b := s.Store.NewBatch()
		for _, a := range acts {
			if err := s.applyLifecycle(b, &brec, bucket, a, now, &c); err != nil {
				state.CloseBatch(b)
				return c, nil, err
			}
		}
		if c != (lifecycle.Counts{}) {
			state.Set(b, state.BucketKey(bucket), brec.Encode())
			s.Buckets[bucket] = brec
		}
		if record != nil {
			if err := record(b, c); err != nil {
				state.CloseBatch(b)
				return c, nil, err
			}
		}
		return c, b, nil
	})
}

func (s Versions) applyLifecycle(b *pebble.Batch, brec *state.BucketRecord, bucket string, a lifecycle.Action, now time.Time, c *lifecycle.Counts) error {
	cur, exists, err := s.getKey(bucket, a.Key)
	if err != nil {
		return err
	}
	switch {
	case a.ExpireCurrent:
		if !exists || cur.Version.String() != a.CurrentID || !cur.Created.Equal(a.CurrentCreated) {
			return nil // written or deleted since
		}
		if brec.Versioning == verrec.Unversioned {
			if gone, err := s.expireVersion(b, brec, storedVersion{rec: cur}, now, c); !gone || err != nil {
				return err
			}
			state.Del(b, state.ObjectKey(bucket, a.Key))
			brec.Keys--
			c.Expired++
			return nil
		}
		if _, err := s.addMarker(b, brec, bucket, a.Key, cur, exists, now); err != nil {
			return err
		}
		c.Expired++
	case a.RemoveMarker != "":
		if exists {
			return nil
		}
		vs, err := s.olderVersions(bucket, a.Key, 2)
		if err != nil || len(vs) != 1 || !vs[0].rec.Version.Marker || vs[0].rec.Version.String() != a.RemoveMarker {
			return err // no longer the key's only version
		}
		if gone, err := s.expireVersion(b, brec, vs[0], now, c); !gone || err != nil {
			return err
		}
		c.MarkersRemoved++
	default:
		var newest []byte // the key's newest version when it has no current one: never removed here
		if !exists {
			vs, err := s.olderVersions(bucket, a.Key, 1)
			if err != nil {
				return err
			}
			if len(vs) > 0 {
				newest = vs[0].skey
			}
		}
		for _, id := range a.Remove {
			v, found, err := s.findVersion(bucket, a.Key, cur, exists, id)
			if err != nil {
				return err
			}
			if !found || v.skey == nil || bytes.Equal(v.skey, newest) {
				continue // gone, or current since
			}
			gone, err := s.expireVersion(b, brec, v, now, c)
			if err != nil {
				return err
			}
			if gone {
				c.Noncurrent++
			}
		}
	}
	return nil
}

// expireVersion is where lifecycle removes one version for good (a
// noncurrent version, an expired delete marker, or the current version
// of an unversioned bucket, whose 'K' record its caller deletes): its
// record goes (skey) and its blocks to the block GC. THE one place a
// lifecycle deletion of a version happens. A version object lock holds
// (lockmeta.CheckRemoveMeta: a legal hold, a retention not yet expired;
// lifecycle never bypasses GOVERNANCE) is left alone: gone false, nothing
// written, counted as Locked, and the next run sees it again (a refusal
// from forget would fail the whole page's batch, every run). An error
// fails the batch.
func (s Versions) expireVersion(b *pebble.Batch, brec *state.BucketRecord, v storedVersion, now time.Time, c *lifecycle.Counts) (gone bool, err error) {
	if lockmeta.CheckRemoveMeta(v.rec.Object, now, lockmeta.Override{}) != nil {
		c.Locked++
		return false, nil
	}
	if v.skey != nil {
		state.Del(b, v.skey)
	}
	if err := s.forget(b, brec, v.rec, state.ReasonDeleted, now, lockmeta.Override{}); err != nil {
		return false, err
	}
	c.BytesFreed += v.rec.Size
	return true, nil
}
