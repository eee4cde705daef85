package namespace

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/meta/authz"
	"github.com/spindle-store/spindle/internal/meta/cluster"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/meta/state/verrec"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/versionapi"
)

// CreateBucket creates an empty bucket (ErrExists if it exists).
func (s *Namespace) CreateBucket(name string) (*metaapi.Bucket, error) {
	if err := metaapi.ValidBucket(name); err != nil {
		return nil, err
	}
	return state.Mutate(s.State, func() (*metaapi.Bucket, *pebble.Batch, error) {
		if _, ok := s.Buckets[name]; ok {
			return nil, nil, fmt.Errorf("%w: bucket %s", metaapi.ErrExists, name)
		}
		rec := state.BucketRecord{Created: s.Cfg.Now()}
		b := s.Store.NewBatch()
		state.Set(b, state.BucketKey(name), rec.Encode())
		s.Buckets[name] = rec
		return bucketView(name, rec), b, nil
	})
}

func bucketView(name string, r state.BucketRecord) *metaapi.Bucket {
	return &metaapi.Bucket{Name: name, Created: r.Created, Keys: r.Keys, Bytes: r.Bytes, Owner: r.Owner}
}

// ListBuckets lists every bucket by name.
func (s *Namespace) ListBuckets() (*metaapi.BucketList, error) {
	return state.Read(s.State, func() (*metaapi.BucketList, error) {
		l := &metaapi.BucketList{Buckets: []metaapi.Bucket{}}
		for _, name := range slices.Sorted(maps.Keys(s.Buckets)) {
			l.Buckets = append(l.Buckets, *bucketView(name, s.Buckets[name]))
		}
		return l, nil
	})
}

// DeleteBucket deletes a bucket without keys (ErrNotEmpty if it has any);
// its multipart uploads in progress are aborted with it, as in S3.
func (s *Namespace) DeleteBucket(name string) error {
	if err := metaapi.ValidBucket(name); err != nil {
		return err
	}
	_, err := state.Mutate(s.State, func() (struct{}, *pebble.Batch, error) {
		rec, ok := s.Buckets[name]
		if !ok {
			return struct{}{}, nil, fmt.Errorf("%w %s", metaapi.ErrNoSuchBucket, name)
		}
		if rec.Keys > 0 {
			return struct{}{}, nil, fmt.Errorf("%w: bucket %s holds %d keys", metaapi.ErrNotEmpty, name, rec.Keys)
		}
		// The count and the keys are written in the same batches; check the
		// keys themselves anyway, cheaply.
		first, err := s.firstKey(name)
		if err != nil {
			return struct{}{}, nil, err
		}
		if first != "" {
			panic(fmt.Sprintf("meta: bucket %s counts 0 keys but holds key %q", name, first))
		}
		if older, err := (Versions{s}).firstVersion(name); err != nil || older != "" { // noncurrent versions, delete markers
			return struct{}{}, nil, cmp.Or(err, fmt.Errorf("%w: bucket %s holds versions of %q", metaapi.ErrNotEmpty, name, older))
		}
		b := s.Store.NewBatch()
		if err := s.mp.dropBucketUploads(b, name, s.Cfg.Now()); err != nil {
			state.CloseBatch(b)
			return struct{}{}, nil, err
		}
		dropBucketConf(b, name)
		if err := authz.DropBucket(s.State, b, name); err != nil { // its grants go with it
			state.CloseBatch(b)
			return struct{}{}, nil, err
		}
		state.Del(b, state.BucketKey(name))
		delete(s.Buckets, name)
		return struct{}{}, b, nil
	})
	return err
}

func (s *Namespace) firstKey(bucket string) (string, error) {
	return s.firstIn(state.KeyPrefix(bucket))
}

func (s Versions) firstVersion(bucket string) (string, error) {
	return s.firstIn(verrec.KeyPrefix(bucket))
}

// firstIn is the rest of the first store key starting with p ("": none).
func (s *Namespace) firstIn(p []byte) (_ string, err error) {
	bucket := string(p[1 : len(p)-1])
	it, err := s.Store.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: state.PrefixEnd(p)})
	if err != nil {
		return "", err
	}
	defer state.CloseInto(it, &err, "keys of "+bucket)
	if it.First() {
		return string(it.Key()[len(p):]), nil
	}
	return "", it.Error()
}

// getKey reads a key record (ok false: no such key).
func (s *Namespace) getKey(bucket, key string) (_ state.KeyRecord, _ bool, err error) {
	v, closer, err := s.Store.Get(state.ObjectKey(bucket, key))
	if errors.Is(err, pebble.ErrNotFound) {
		return state.KeyRecord{}, false, nil
	}
	if err != nil {
		return state.KeyRecord{}, false, fmt.Errorf("meta: read key %s/%s: %w", bucket, key, err)
	}
	defer state.CloseInto(closer, &err, "read key record") // no formatting: every commit reads its key
	rec, err := state.DecodeKey(v)
	if err != nil {
		return rec, false, fmt.Errorf("meta: key %s/%s: %w", bucket, key, err)
	}
	return rec, true, nil
}

// CommitKey makes bucket/key the given blocks, atomically (one synced
// batch), replacing an older version whose blocks are scheduled for
// deletion. See the metaapi package comment for the rules.
func (s *Namespace) CommitKey(bucket, key string, ck *metaapi.CommitKey) (*metaapi.KeyInfo, error) {
	return s.CommitKeyAs(bucket, key, ck, nil)
}

// Check is a commit's authorization (package meta/authz), called under
// s.mu once the commit knows whether it replaces a key (exists): after a
// retried commit is recognised (answered as before), before anything else
// is looked at; its error refuses the commit. nil: none (trusted callers).
type Check func(bucket, key string, exists bool) error

// CommitKeyAs is CommitKey checked by check.
func (s *Namespace) CommitKeyAs(bucket, key string, ck *metaapi.CommitKey, check Check) (*metaapi.KeyInfo, error) {
	if err := s.checkCommit(ck); err != nil {
		return nil, err
	}
	ki, err := state.Mutate(s.State, func() (*metaapi.KeyInfo, *pebble.Batch, error) { return s.commitKeyLocked(bucket, key, ck, check) })
	if err == nil {
		s.Metrics.Commits.Inc()
		ki.Inline = nil // the committer has the value: the answer does not carry it back
	}
	return ki, err
}

// checkCommit is CommitKey's validation of a commit's shape, before s.mu.
func (s *Namespace) checkCommit(ck *metaapi.CommitKey) error {
	if len(ck.Inline) > 0 {
		if err := checkInline(ck); err != nil {
			return err
		}
	} else if err := s.checkBlockList(ck.Blocks, ck.Size); err != nil {
		return err
	}
	if ck.Object != nil {
		return ck.Object.Validate()
	}
	return nil
}

// CommitKeys commits a batch (metaapi.CommitsRoute): each commit as
// CommitKey would make it, in order, each its own store batch (so a later
// commit of the same key sees the earlier one), all under one hold of
// s.mu; the answers come once every one applied is durable (they share
// the sync, or the raft round). One result per commit: a refused commit
// changes nothing and does not affect the others. A service that does
// not serve (closed, failed, not the leader) refuses the whole batch.
func (s *Namespace) CommitKeys(items []metaapi.BatchedCommit) ([]metaapi.CommitResult, error) {
	return s.CommitKeysAs(items, nil)
}

// CommitKeysAs is CommitKeys, each commit checked by check.
func (s *Namespace) CommitKeysAs(items []metaapi.BatchedCommit, check Check) ([]metaapi.CommitResult, error) {
	if len(items) > metaapi.MaxCommitBatch {
		return nil, fmt.Errorf("%w: %d commits in a batch, at most %d", metaapi.ErrInvalid, len(items), metaapi.MaxCommitBatch)
	}
	pre := make([]error, len(items))
	for i := range items {
		pre[i] = s.checkCommit(&items[i].CommitKey)
	}
	kis, errs, werr, err := state.ApplyEach(s.State, pre, func(i int) (*metaapi.KeyInfo, *pebble.Batch, error) {
		it := &items[i]
		return s.commitKeyLocked(it.Bucket, it.Key, &it.CommitKey, check)
	})
	if err != nil {
		return nil, err
	}
	res := make([]metaapi.CommitResult, len(items))
	for i := range items {
		if err := cmp.Or(errs[i], werr); err != nil && (errs[i] != nil || kis[i] != nil) {
			res[i].Error = state.APIError(fmt.Sprintf("commit %s/%s", items[i].Bucket, items[i].Key), err)
			continue
		}
		kis[i].Inline = nil // the committer has the value
		res[i].Key = kis[i]
		s.Metrics.Commits.Inc()
	}
	return res, nil
}

// commitKeyLocked is CommitKey, validated, under s.mu.
func (s *Namespace) commitKeyLocked(bucket, key string, ck *metaapi.CommitKey, check Check) (*metaapi.KeyInfo, *pebble.Batch, error) {
	brec, err := s.BucketOf(bucket, key)
	if err != nil {
		return nil, nil, err
	}
	old, exists, err := s.getKey(bucket, key)
	if err != nil {
		return nil, nil, err
	}
	now := s.Cfg.Now()
	// A commit of blocks that are the key's already is a retry. Without
	// blocks, equal bytes and metadata do not make one: a conditional put
	// of the same bytes is checked (a retry of it is known by its ID).
	// In a versioned bucket a put of equal bytes is a new version: a
	// commit with an ID is known as a retry by it (below) alone.
	inlineRetry := ck.Conditions == (metaapi.Conditions{}) && (ck.CommitID == "" || brec.Versioning == verrec.Unversioned)
	if exists && sameVersion(old, ck) && (len(ck.Blocks) > 0 || inlineRetry) {
		return s.keyInfo(bucket, key, old, now), nil, nil // a retried commit
	}
	if len(ck.Blocks) == 0 && ck.CommitID != "" {
		// A retried commit of an inline (or empty) value is not refused as
		// one of blocks is (no block is found used): its ID is what tells
		// it from a new put. Applied again after another put of the key,
		// it would bring the old value back — one put taking effect twice.
		rec, found, err := s.committedByID(ck.CommitID, bucket, key)
		if err != nil {
			return nil, nil, err
		}
		if found {
			return s.keyInfo(bucket, key, rec, now), nil, nil
		}
	}
	if check != nil {
		if err := check(bucket, key, exists); err != nil {
			return nil, nil, err
		}
	}
	if err := checkConditions(bucket, key, old, exists, ck.Conditions); err != nil {
		return s.retriedCommit(bucket, key, ck, now, err)
	}
	blocks, err := s.claimable(bucket, key, ck.Blocks)
	if err != nil {
		return s.retriedCommit(bucket, key, ck, now, err)
	}
	rec := state.KeyRecord{Size: ck.Size, CRC32C: ck.CRC32C, Created: now, Blocks: blocks, Inline: ck.Inline, Object: ck.Object}
	// Valid: one batch makes the key visible, consumes the allocations,
	// schedules the old blocks' deletion and updates the counts.
	b := s.Store.NewBatch()
	if err := (Versions{s}).placeVersion(b, &brec, bucket, key, old, exists, &rec, now); err != nil { // versions.go
		state.CloseBatch(b)
		return nil, nil, err
	}
	s.claim(b, rec.Blocks)
	state.Set(b, state.BucketKey(bucket), brec.Encode())
	s.Buckets[bucket] = brec
	if ck.CommitID != "" {
		recordCommitID(b, ck.CommitID, bucket, key, rec)
	}
	return s.keyInfo(bucket, key, rec, now), b, nil
}

// claimable checks that every block was allocated for bucket/key and not
// committed since, and returns them as stored (with their pipelines).
func (s *Namespace) claimable(bucket, key string, kbs []metaapi.KeyBlock) ([]state.StoredBlock, error) {
	blocks := make([]state.StoredBlock, 0, len(kbs))
	for _, kb := range kbs {
		ref := state.BlockRef{Container: kb.Container, Local: kb.Local}
		a, ok := s.Allocs[ref]
		if !ok {
			return nil, fmt.Errorf("%w: block %d/%d was not allocated by this meta service, or was committed already, or its allocation expired", metaapi.ErrInvalid, kb.Container, kb.Local)
		}
		if a.Bucket != bucket || (a.Key != "" && a.Key != key) { // "": allocated for any key of the bucket
			return nil, fmt.Errorf("%w: block %d/%d was allocated for %s/%s, not %s/%s", metaapi.ErrInvalid, kb.Container, kb.Local, a.Bucket, a.Key, bucket, key)
		}
		c := s.ContainerByID[kb.Container]
		if kb.Pipeline != 0 && kb.Pipeline != c.Rec.Pipeline {
			return nil, fmt.Errorf("%w: block %d/%d is in pipeline %d, not %d", metaapi.ErrInvalid, kb.Container, kb.Local, c.Rec.Pipeline, kb.Pipeline)
		}
		blocks = append(blocks, state.StoredBlock{Container: kb.Container, Local: kb.Local, Pipeline: c.Rec.Pipeline, Length: kb.Length})
	}
	return blocks, nil
}

// claim consumes the allocations of claimable blocks in b and counts
// their bytes in their containers (closing the full ones).
func (s *Namespace) claim(b *pebble.Batch, blocks []state.StoredBlock) {
	touched := map[uint64]bool{}
	for _, sb := range blocks {
		state.Del(b, state.BlockKey(state.PrefixAlloc, sb.Container, sb.Local))
		delete(s.Allocs, state.BlockRef{Container: sb.Container, Local: sb.Local})
		c := s.ContainerByID[sb.Container]
		c.Rec.Committed += sb.Length
		touched[sb.Container] = true
	}
	for _, cid := range slices.Sorted(maps.Keys(touched)) {
		c := s.ContainerByID[cid]
		state.Set(b, state.U64Key(state.PrefixContainer, cid), c.Rec.Encode())
		if c.Rec.Committed >= s.FullBytes() {
			s.cl.StartClose(b, c, fmt.Sprintf("%d bytes committed", c.Rec.Committed))
		}
	}
}

// checkInline checks an inline commit: no blocks, the size and CRC32C
// of its value, at most MaxInlineBytes.
func checkInline(ck *metaapi.CommitKey) error {
	if len(ck.Blocks) > 0 {
		return fmt.Errorf("%w: a value inline and %d blocks", metaapi.ErrInvalid, len(ck.Blocks))
	}
	if len(ck.Inline) > metaapi.MaxInlineBytes {
		return fmt.Errorf("%w: inline value of %d bytes, at most %d", metaapi.ErrInvalid, len(ck.Inline), metaapi.MaxInlineBytes)
	}
	if ck.Size != uint64(len(ck.Inline)) {
		return fmt.Errorf("%w: inline value of %d bytes, size says %d", metaapi.ErrInvalid, len(ck.Inline), ck.Size)
	}
	if sum := crc32c.Checksum(ck.Inline); sum != ck.CRC32C {
		return fmt.Errorf("%w: inline value's CRC32C is %08x, the commit says %08x", metaapi.ErrInvalid, sum, ck.CRC32C)
	}
	return nil
}

// checkBlockList checks a block list's shape: at most MaxBlocksPerKey, no
// block twice, none empty or absurd, lengths adding up to size.
func (s *Namespace) checkBlockList(kbs []metaapi.KeyBlock, size uint64) error {
	if len(kbs) > state.MaxBlocksPerKey {
		return fmt.Errorf("%w: %d blocks, at most %d", metaapi.ErrInvalid, len(kbs), state.MaxBlocksPerKey)
	}
	var sum uint64
	seen := make(map[state.BlockRef]bool, len(kbs))
	for i, kb := range kbs {
		ref := state.BlockRef{Container: kb.Container, Local: kb.Local}
		if seen[ref] {
			return fmt.Errorf("%w: block %d/%d appears twice", metaapi.ErrInvalid, kb.Container, kb.Local)
		}
		seen[ref] = true
		if kb.Length == 0 {
			return fmt.Errorf("%w: block %d (%d/%d) has length 0", metaapi.ErrInvalid, i, kb.Container, kb.Local)
		}
		if kb.Length > s.Cfg.ContainerSizeBytes || sum+kb.Length < sum {
			return fmt.Errorf("%w: block %d (%d/%d): length %d is absurd", metaapi.ErrInvalid, i, kb.Container, kb.Local, kb.Length)
		}
		sum += kb.Length
	}
	if sum != size {
		return fmt.Errorf("%w: the blocks hold %d bytes, size says %d", metaapi.ErrInvalid, sum, size)
	}
	return nil
}

func sameVersion(old state.KeyRecord, ck *metaapi.CommitKey) bool {
	if (old.Object == nil) != (ck.Object == nil) || (old.Object != nil && old.Object.ETag != ck.Object.ETag) {
		return false
	}
	if len(ck.Blocks) == 0 && !SameObjectMeta(old.Object, ck.Object) {
		// Without blocks (an inline or empty value) the bytes do not name
		// the put that wrote them: a new put of the same bytes with other
		// metadata (a copy onto itself with new metadata, a new
		// Content-Type) is a new version, not a retry.
		return false
	}
	if old.Size != ck.Size || old.CRC32C != ck.CRC32C || len(old.Blocks) != len(ck.Blocks) || !bytes.Equal(old.Inline, ck.Inline) {
		return false
	}
	for i, sb := range old.Blocks {
		kb := ck.Blocks[i]
		if sb.Container != kb.Container || sb.Local != kb.Local || sb.Length != kb.Length || (kb.Pipeline != 0 && kb.Pipeline != sb.Pipeline) {
			return false
		}
	}
	return true
}

// sameObjectMeta says whether two S3 metadata sets are equal (a nil map
// and an empty one alike).
func SameObjectMeta(a, b *metaapi.ObjectMeta) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.ETag == b.ETag && a.ContentType == b.ContentType && a.ChecksumType == b.ChecksumType && a.Parts == b.Parts &&
		maps.Equal(a.Headers, b.Headers) && maps.Equal(a.UserMeta, b.UserMeta) && maps.Equal(a.Checksums, b.Checksums)
}

// keyInfo is the API form of a key, with its blocks' replicas.
func (s *Namespace) keyInfo(bucket, key string, rec state.KeyRecord, now time.Time) *metaapi.KeyInfo {
	ki := &metaapi.KeyInfo{Bucket: bucket, Key: key, Size: rec.Size, CRC32C: rec.CRC32C, Created: rec.Created, Blocks: make([]metaapi.KeyBlock, 0, len(rec.Blocks)), Inline: rec.Inline, Object: rec.Object}
	if rec.Version.Present() || s.Buckets[bucket].Versioning != verrec.Unversioned {
		ki.VersionID = rec.Version.String()
	}
	members := map[uint64][]metaapi.Member{} // by container: most keys have many blocks in few containers
	for _, sb := range rec.Blocks {
		kb := metaapi.KeyBlock{BlockRef: metaapi.BlockRef{Container: sb.Container, Local: sb.Local}, Pipeline: sb.Pipeline, Length: sb.Length}
		if p := s.PipelineByID[sb.Pipeline]; p != nil {
			ms, ok := members[sb.Container]
			if !ok {
				ms = s.cl.ReadMembers(sb.Container, p, now)
				members[sb.Container] = ms
			}
			kb.Members = slices.Clone(ms)
		}
		ki.Blocks = append(ki.Blocks, kb)
	}
	return ki
}

// GetKey returns a committed key with its blocks and their replicas.
func (s *Namespace) GetKey(bucket, key string) (*metaapi.KeyInfo, error) {
	return state.Read(s.State, func() (*metaapi.KeyInfo, error) {
		if _, err := s.BucketOf(bucket, key); err != nil {
			return nil, err
		}
		rec, ok, err := s.getKey(bucket, key)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%w %s/%s", metaapi.ErrNoSuchKey, bucket, key)
		}
		return s.keyInfo(bucket, key, rec, s.Cfg.Now()), nil
	})
}

// GetKeys looks a batch of keys up (metaapi.GetsRoute), each as GetKey
// would, under one hold of s.mu for reading, answered once everything
// they may have seen is durable (one wait, or one ReadIndex round, for
// the batch). One result per key; a service that does not serve refuses
// the whole batch.
func (s *Namespace) GetKeys(names []metaapi.KeyName) ([]metaapi.GetResult, error) {
	if len(names) > metaapi.MaxCommitBatch {
		return nil, fmt.Errorf("%w: %d keys in a batch, at most %d", metaapi.ErrInvalid, len(names), metaapi.MaxCommitBatch)
	}
	return state.Read(s.State, func() ([]metaapi.GetResult, error) {
		now := s.Cfg.Now()
		res := make([]metaapi.GetResult, len(names))
		for i, n := range names {
			what := fmt.Sprintf("get %s/%s", n.Bucket, n.Key)
			if _, err := s.BucketOf(n.Bucket, n.Key); err != nil {
				res[i].Error = state.APIError(what, err)
				continue
			}
			rec, ok, err := s.getKey(n.Bucket, n.Key)
			if err == nil && !ok {
				err = fmt.Errorf("%w %s/%s", metaapi.ErrNoSuchKey, n.Bucket, n.Key)
			}
			if err != nil {
				res[i].Error = state.APIError(what, err)
				continue
			}
			res[i].Key = s.keyInfo(n.Bucket, n.Key, rec, now)
		}
		return res, nil
	})
}

// DeleteKey removes a key; its blocks are scheduled for deletion. In a
// versioned bucket it makes a delete marker (DeleteVersion).
func (s *Namespace) DeleteKey(bucket, key string) error {
	_, err := Versions{s}.DeleteVersion(versionapi.Ref{Bucket: bucket, Key: key})
	return err
}

// ListOptions select a page of a listing.
type ListOptions struct {
	Prefix     string
	StartAfter string
	Limit      int // 0: MaxListLimit
	// Delimiter rolls keys up into common prefixes (see metaapi.KeyList);
	// a common prefix not after StartAfter is skipped whole.
	Delimiter string
}

// List returns up to Limit keys of bucket that start with Prefix and come
// after StartAfter, in byte order, without their blocks; Next is set when
// more follow.
func (s *Namespace) List(bucket string, o ListOptions) (*metaapi.KeyList, error) {
	if err := metaapi.ValidBucket(bucket); err != nil {
		return nil, err
	}
	if o.Limit < 0 || o.Limit > metaapi.MaxListLimit {
		return nil, fmt.Errorf("%w: limit %d: want 1..%d", metaapi.ErrInvalid, o.Limit, metaapi.MaxListLimit)
	}
	if o.Limit == 0 {
		o.Limit = metaapi.MaxListLimit
	}
	if len(o.Prefix) > state.MaxKeyBytes || len(o.StartAfter) > state.MaxKeyBytes || len(o.Delimiter) > state.MaxKeyBytes {
		return nil, fmt.Errorf("%w: prefix or start_after longer than %d bytes", metaapi.ErrInvalid, state.MaxKeyBytes)
	}
	return state.Read(s.State, func() (*metaapi.KeyList, error) { return s.listLocked(bucket, o) })
}

// listLocked is List, validated, under s.mu.
func (s *Namespace) listLocked(bucket string, o ListOptions) (_ *metaapi.KeyList, err error) {
	if _, ok := s.Buckets[bucket]; !ok {
		return nil, fmt.Errorf("%w %s", metaapi.ErrNoSuchBucket, bucket)
	}
	kp := state.KeyPrefix(bucket)
	lo := append(slices.Clone(kp), o.Prefix...)
	hi := state.PrefixEnd(lo)
	if o.Prefix == "" {
		hi = state.PrefixEnd(kp)
	}
	it, err := s.Store.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, fmt.Errorf("meta: list %s: %w", bucket, err)
	}
	defer state.CloseInto(it, &err, "list "+bucket)
	var ok bool
	if o.StartAfter != "" {
		// The first key after StartAfter: StartAfter + 0x00 is its
		// immediate successor.
		ok = it.SeekGE(append(append(slices.Clone(kp), o.StartAfter...), 0))
	} else {
		ok = it.First()
	}
	l := &metaapi.KeyList{Keys: []metaapi.KeyInfo{}}
	last := ""
	for ok {
		name := string(it.Key()[len(kp):])
		if o.Delimiter != "" {
			if i := strings.Index(name[len(o.Prefix):], o.Delimiter); i >= 0 {
				// Roll the keys under cp up, then seek past them all.
				cp := name[:len(o.Prefix)+i+len(o.Delimiter)]
				if cp > o.StartAfter {
					if len(l.Keys)+len(l.CommonPrefixes) == o.Limit {
						l.Next = last
						break
					}
					l.CommonPrefixes = append(l.CommonPrefixes, cp)
					last = cp
				}
				end := state.PrefixEnd(append(slices.Clone(kp), cp...))
				if end == nil {
					break
				}
				ok = it.SeekGE(end)
				continue
			}
		}
		if len(l.Keys)+len(l.CommonPrefixes) == o.Limit {
			l.Next = last
			break
		}
		rec, err := state.DecodeKey(it.Value())
		if err != nil {
			return nil, fmt.Errorf("meta: key %s/%s: %w", bucket, name, err)
		}
		if rec.Object != nil && rec.Object.PartSizes != nil {
			om := *rec.Object
			om.PartSizes, rec.Object = nil, &om // GetKey answers them, a listing need not
		}
		l.Keys = append(l.Keys, metaapi.KeyInfo{Bucket: bucket, Key: name, Size: rec.Size, CRC32C: rec.CRC32C, Created: rec.Created, Object: rec.Object})
		last = name
		ok = it.Next()
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("meta: list %s: %w", bucket, err)
	}
	return l, nil
}

// checkConditions checks a commit's S3 conditions against the key's
// current version (exists false: none), as S3: If-None-Match refuses an
// existing key (ErrPrecondition), If-Match a missing one (ErrNoSuchKey)
// or another ETag (ErrPrecondition). Under s.mu, in the commit: two
// writers racing with If-None-Match * are serialized here, and exactly
// one commits.
func checkConditions(bucket, key string, cur state.KeyRecord, exists bool, c metaapi.Conditions) error {
	etag := ""
	if exists && cur.Object != nil {
		etag = cur.Object.ETag
	}
	if c.IfMatch != "" && !exists {
		return fmt.Errorf("%w %s/%s (If-Match %s)", metaapi.ErrNoSuchKey, bucket, key, c.IfMatch)
	}
	if c.IfNoneMatch != "" && exists && (c.IfNoneMatch == "*" || trimETag(c.IfNoneMatch) == etag) {
		return fmt.Errorf("%w: %s/%s exists (If-None-Match %s)", metaapi.ErrPrecondition, bucket, key, c.IfNoneMatch)
	}
	if c.IfMatch != "" && (!exists || (c.IfMatch != "*" && trimETag(c.IfMatch) != etag)) {
		return fmt.Errorf("%w: %s/%s does not have ETag %s", metaapi.ErrPrecondition, bucket, key, c.IfMatch)
	}
	return nil
}

func trimETag(s string) string { return strings.Trim(s, "\"") }

// Namespace holds buckets and keys.
type Namespace struct {
	*state.State
	cl    *cluster.Cluster
	alloc *cluster.Allocator
	gc    *cluster.BlockGC
	mp    *Multipart
}

// New is the namespace over st, and its multipart uploads: blocks come
// from alloc in cl's pipelines, and go to gc when no key holds them.
func New(st *state.State, cl *cluster.Cluster, alloc *cluster.Allocator, gc *cluster.BlockGC) (*Namespace, *Multipart) {
	ns := &Namespace{State: st, cl: cl, alloc: alloc, gc: gc}
	ns.mp = &Multipart{State: st, ns: ns, gc: gc}
	return ns, ns.mp
}
