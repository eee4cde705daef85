package meta

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
	"github.com/spindle-store/spindle/internal/metaapi"
)

// CreateBucket creates an empty bucket (ErrExists if it exists).
func (s *Service) CreateBucket(name string) (*metaapi.Bucket, error) {
	if err := metaapi.ValidBucket(name); err != nil {
		return nil, err
	}
	return mutate(s, func() (*metaapi.Bucket, *pebble.Batch, error) {
		if _, ok := s.buckets[name]; ok {
			return nil, nil, fmt.Errorf("%w: bucket %s", metaapi.ErrExists, name)
		}
		rec := bucketRecord{Created: s.cfg.Now()}
		b := s.db.NewBatch()
		set(b, bucketKey(name), rec.encode())
		s.buckets[name] = rec
		return bucketView(name, rec), b, nil
	})
}

func bucketView(name string, r bucketRecord) *metaapi.Bucket {
	return &metaapi.Bucket{Name: name, Created: r.Created, Keys: r.Keys, Bytes: r.Bytes, Owner: r.Owner}
}

// ListBuckets lists every bucket by name.
func (s *Service) ListBuckets() (*metaapi.BucketList, error) {
	return read(s, func() (*metaapi.BucketList, error) {
		l := &metaapi.BucketList{Buckets: []metaapi.Bucket{}}
		for _, name := range slices.Sorted(maps.Keys(s.buckets)) {
			l.Buckets = append(l.Buckets, *bucketView(name, s.buckets[name]))
		}
		return l, nil
	})
}

// DeleteBucket deletes a bucket without keys (ErrNotEmpty if it has any);
// its multipart uploads in progress are aborted with it, as in S3.
func (s *Service) DeleteBucket(name string) error {
	if err := metaapi.ValidBucket(name); err != nil {
		return err
	}
	_, err := mutate(s, func() (struct{}, *pebble.Batch, error) {
		rec, ok := s.buckets[name]
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
		b := s.db.NewBatch()
		if err := s.dropBucketUploads(b, name, s.cfg.Now()); err != nil {
			b.Close()
			return struct{}{}, nil, err
		}
		del(b, bucketKey(name))
		delete(s.buckets, name)
		return struct{}{}, b, nil
	})
	return err
}

func (s *Service) firstKey(bucket string) (string, error) {
	p := keyPrefix(bucket)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return "", err
	}
	defer it.Close()
	if it.First() {
		return string(it.Key()[len(p):]), nil
	}
	return "", it.Error()
}

// bucketOf checks the names and returns the bucket's record.
func (s *Service) bucketOf(bucket, key string) (bucketRecord, error) {
	if err := metaapi.ValidBucket(bucket); err != nil {
		return bucketRecord{}, err
	}
	if err := metaapi.ValidKey(key); err != nil {
		return bucketRecord{}, err
	}
	rec, ok := s.buckets[bucket]
	if !ok {
		return rec, fmt.Errorf("%w %s", metaapi.ErrNoSuchBucket, bucket)
	}
	return rec, nil
}

// allocatable: OPEN, every member HEALTHY and serving it (or not heard
// from since the start: presumed to serve it as before).
func (s *Service) allocatable(p *pipelineState, now time.Time) bool {
	if p.rec.State != pipelineOpen {
		return false
	}
	for _, m := range p.rec.Members {
		n := s.nodes[m]
		if s.healthOf(n, now) != metaapi.HealthHealthy || (n.seen && !s.reports(m, p.rec.ID)) {
			return false
		}
	}
	return !s.leaderless(p, now)
}

// leaderGrace: a pipeline younger than this is not called leaderless (its
// members report it before its first election ends).
const leaderGrace = 3 * metaapi.DefaultHeartbeatInterval

// leaderless: the newest report of p (of the live members that report it)
// names no leader, and p is older than leaderGrace. Its members have lost
// their leader and not elected another: a majority of them is down or cut
// off (though not yet STALE), or an election is under way. A write handed
// out there would wait for the election or fail, so p is not handed out
// until a report names a leader again: after two datanodes of five died,
// puts went to their pipelines for the 5 s until STALE.
func (s *Service) leaderless(p *pipelineState, now time.Time) bool {
	if now.Sub(p.rec.Created) < leaderGrace {
		return false
	}
	var newest time.Time
	lead, found := uint64(0), false
	for _, m := range p.rec.Members {
		if !s.live(m, now) || !s.reports(m, p.rec.ID) {
			continue
		}
		if n := s.nodes[m]; !found || n.last.After(newest) {
			newest, lead, found = n.last, n.pipelines[p.rec.ID].LeaderID, true
		}
	}
	return found && lead == 0
}

// degradedAllocatable: OPEN, a raft majority of its members HEALTHY and
// serving it, none DEAD (the others STALE: a datanode just killed, not yet
// declared dead). Its writes commit on that majority, fsynced on each, as
// raft's quorum has it; used only when no pipeline is allocatable, so that
// puts go on through the seconds between a datanode's death and its
// pipelines' closing (with 3 datanodes every pipeline holds each of them).
func (s *Service) degradedAllocatable(p *pipelineState, now time.Time) bool {
	if p.rec.State != pipelineOpen {
		return false
	}
	ok := 0
	for _, m := range p.rec.Members {
		n := s.nodes[m]
		switch h := s.healthOf(n, now); {
		case h == metaapi.HealthDead:
			return false
		case h == metaapi.HealthHealthy && (!n.seen || s.reports(m, p.rec.ID)):
			ok++
		}
	}
	return ok > len(p.rec.Members)/2 && !s.leaderless(p, now)
}

// Allocate hands out a new block for bucket/key: a fresh local ID in an
// OPEN container of an allocatable pipeline (round robin over them; when
// there is none, of a pipeline with a majority of HEALTHY members),
// recorded with its time so that it can be committed once, or deleted
// after AllocationGrace.
func (s *Service) Allocate(req *metaapi.AllocateRequest) (*metaapi.AllocateResponse, error) {
	resp, err := mutate(s, func() (*metaapi.AllocateResponse, *pebble.Batch, error) { return s.allocateLocked(req) })
	if err == nil {
		s.metrics.allocations.Inc()
	}
	return resp, err
}

// AllocateMany makes a batch of allocations (metaapi.AllocationsRoute):
// each as Allocate would, in order, under one hold of s.mu, each its own
// store batch; the answers come once every one is durable (one sync or
// raft round for the batch). One result per request; a refusal
// (NO_PIPELINE, an unknown bucket) does not affect the others. A service
// that does not serve refuses the whole batch.
func (s *Service) AllocateMany(reqs []metaapi.AllocateRequest) ([]metaapi.AllocateResult, error) {
	if len(reqs) > metaapi.MaxCommitBatch {
		return nil, fmt.Errorf("%w: %d allocations in a batch, at most %d", metaapi.ErrInvalid, len(reqs), metaapi.MaxCommitBatch)
	}
	got, errs, werr, err := applyEach(s, make([]error, len(reqs)), func(i int) (*metaapi.AllocateResponse, *pebble.Batch, error) {
		return s.allocateLocked(&reqs[i])
	})
	if err != nil {
		return nil, err
	}
	res := make([]metaapi.AllocateResult, len(reqs))
	for i := range reqs {
		if err := cmp.Or(errs[i], werr); err != nil && (errs[i] != nil || got[i] != nil) {
			res[i].Error = apiError(fmt.Sprintf("allocate for %s/%s", reqs[i].Bucket, reqs[i].Key), err)
			continue
		}
		res[i].Block = got[i]
		s.metrics.allocations.Inc()
	}
	return res, nil
}

// applyEach is a batch's mutations, one per item, in order under one hold
// of s.mu, each its own store batch made by fn(i) as the single request
// would make it (an item whose pre[i] is set was refused beforehand and is
// not run). On a replicated service the applied items' batches are staged
// and proposed together (applyStaged): one proposal, one log entry,
// applied atomically on every member. A refusal changes nothing and does
// not affect the others; a failed apply is sticky: it and every later
// item fail with it (and so do the earlier items staged with it, whose
// outcome is unknown once the stint ended). It answers
// once every applied item is durable: per item its value (the zero value
// when refused) and error, and the wait's error. A service that does not
// serve refuses the whole batch (the last error).
func applyEach[T any](s *Service, pre []error, fn func(i int) (T, *pebble.Batch, error)) (vals []T, errs []error, werr, err error) {
	vals, errs = make([]T, len(pre)), pre
	s.mu.Lock()
	if err := s.usable(); err != nil {
		s.mu.Unlock()
		return nil, nil, nil, err
	}
	var own []pending
	refused := false
	for i := range pre {
		if errs[i] != nil {
			refused = true
			continue
		}
		v, b, err := fn(i)
		if err != nil {
			if b != nil {
				b.Close()
			}
			errs[i], refused = err, true
			continue
		}
		p, err := s.applyStaged(b)
		if err != nil { // sticky: this one and every later one fail
			for j := i; j < len(errs); j++ {
				if errs[j] == nil {
					errs[j] = err
				}
			}
			break
		}
		if len(own) == 0 || own[len(own)-1] != p {
			own = append(own, p) // staged items share their proposal
		}
		vals[i] = v
	}
	s.flushStaged()
	front := s.frontier()
	s.mu.Unlock()
	return vals, errs, s.awaitAll(own, refused, front), nil
}

// awaitAll waits for a batch's own pendings, and, when some request was
// refused (a refusal may rest on what it saw), for the frontier; the
// first failure.
func (s *Service) awaitAll(own []pending, refused bool, front pending) error {
	var werr error
	for _, p := range own {
		if err := s.await(p); err != nil && werr == nil {
			werr = err
		}
	}
	if refused && werr == nil {
		werr = s.await(front)
	}
	return werr
}

// apiError is err as one result of a batch.
func apiError(what string, err error) *metaapi.Error {
	code, _ := metaapi.CodeOf(err)
	return &metaapi.Error{Code: code, Reason: metaapi.ReasonOf(err), Message: fmt.Sprintf("%s: %v", what, err)}
}

// allocateLocked is Allocate under s.mu.
func (s *Service) allocateLocked(req *metaapi.AllocateRequest) (*metaapi.AllocateResponse, *pebble.Batch, error) {
	if req.AnyKey {
		if req.Key != "" {
			return nil, nil, fmt.Errorf("%w: an allocation for any key names key %q", metaapi.ErrInvalid, req.Key)
		}
		if _, err := s.bucketOf(req.Bucket, "x"); err != nil { // the bucket's checks only
			return nil, nil, err
		}
	} else if _, err := s.bucketOf(req.Bucket, req.Key); err != nil {
		return nil, nil, err
	}
	now := s.cfg.Now()
	var cands []*pipelineState
	for _, pid := range s.sortedPipelines() {
		if p := s.pipelines[pid]; s.allocatable(p, now) && !slices.Contains(req.ExcludePipelines, pid) {
			cands = append(cands, p)
		}
	}
	if len(cands) == 0 {
		for _, pid := range s.sortedPipelines() {
			if p := s.pipelines[pid]; s.degradedAllocatable(p, now) && !slices.Contains(req.ExcludePipelines, pid) {
				cands = append(cands, p)
			}
		}
		if len(cands) > 0 {
			s.metrics.degradedAllocations.Inc()
		}
	}
	if len(cands) == 0 {
		healthy := 0
		var full []string
		for _, n := range s.nodes {
			if s.healthOf(n, now) == metaapi.HealthHealthy {
				healthy++
				if s.full(n) {
					full = append(full, fmt.Sprintf("node %d has %d MiB", n.rec.ID, n.available>>20))
				}
			}
		}
		open := 0
		for _, p := range s.pipelines {
			if p.rec.State == pipelineOpen {
				open++
			}
		}
		fullNote := ""
		if len(full) > 0 {
			// A full node gets no pipeline: say so, or "3 healthy
			// datanodes" reads as if a pipeline could be made.
			fullNote = fmt.Sprintf(" (%d of them full, below %d MiB available: %s)", len(full), s.cfg.MinAvailableBytes>>20, strings.Join(full, ", "))
		}
		return nil, nil, fmt.Errorf("%w: %d healthy datanodes%s, %d needed for a pipeline; %d open pipelines, %d excluded by the client",
			metaapi.ErrNoPipeline, healthy, fullNote, PipelineSize, open, len(req.ExcludePipelines))
	}
	p := cands[s.rr%uint64(len(cands))]
	s.rr++
	b := s.db.NewBatch()
	var open []*containerState
	for _, cid := range p.containers {
		c := s.containers[cid]
		if c.rec.State != containerOpen {
			continue
		}
		if c.rec.Committed >= s.fullBytes() {
			s.startClose(b, c, fmt.Sprintf("%d bytes committed", c.rec.Committed))
			continue
		}
		open = append(open, c)
	}
	for len(open) < s.cfg.ContainersPerPipeline {
		c := &containerState{rec: containerRecord{ID: s.ctr.NextContainer, Pipeline: p.rec.ID, State: containerOpen, Created: now, NextLocal: 1}}
		s.ctr.NextContainer++
		s.containers[c.rec.ID] = c
		p.containers = append(p.containers, c.rec.ID)
		open = append(open, c)
		set(b, counterKey(), s.ctr.encode())
		s.log.Info("container created", "container", c.rec.ID, "pipeline", p.rec.ID)
	}
	c := open[p.rr%uint64(len(open))]
	p.rr++
	ref := blockRef{c.rec.ID, c.rec.NextLocal}
	c.rec.NextLocal++
	set(b, u64key(prefixContainer, c.rec.ID), c.rec.encode())
	a := allocRecord{Allocated: now, Bucket: req.Bucket, Key: req.Key}
	set(b, blockKey(prefixAlloc, ref.container, ref.local), a.encode())
	s.allocs[ref] = a
	return &metaapi.AllocateResponse{
		Block:    metaapi.BlockRef{Container: ref.container, Local: ref.local},
		Pipeline: *s.pipelineView(p, now),
	}, b, nil
}

// getKey reads a key record (ok false: no such key).
func (s *Service) getKey(bucket, key string) (keyRecord, bool, error) {
	v, closer, err := s.db.Get(objectKey(bucket, key))
	if errors.Is(err, pebble.ErrNotFound) {
		return keyRecord{}, false, nil
	}
	if err != nil {
		return keyRecord{}, false, fmt.Errorf("meta: read key %s/%s: %w", bucket, key, err)
	}
	defer closer.Close()
	rec, err := decodeKey(v)
	if err != nil {
		return rec, false, fmt.Errorf("meta: key %s/%s: %w", bucket, key, err)
	}
	return rec, true, nil
}

// CommitKey makes bucket/key the given blocks, atomically (one synced
// batch), replacing an older version whose blocks are scheduled for
// deletion. See the metaapi package comment for the rules.
func (s *Service) CommitKey(bucket, key string, ck *metaapi.CommitKey) (*metaapi.KeyInfo, error) {
	if err := s.checkCommit(ck); err != nil {
		return nil, err
	}
	ki, err := mutate(s, func() (*metaapi.KeyInfo, *pebble.Batch, error) { return s.commitKeyLocked(bucket, key, ck) })
	if err == nil {
		s.metrics.commits.Inc()
		ki.Inline = nil // the committer has the value: the answer does not carry it back
	}
	return ki, err
}

// checkCommit is CommitKey's validation of a commit's shape, before s.mu.
func (s *Service) checkCommit(ck *metaapi.CommitKey) error {
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
func (s *Service) CommitKeys(items []metaapi.BatchedCommit) ([]metaapi.CommitResult, error) {
	if len(items) > metaapi.MaxCommitBatch {
		return nil, fmt.Errorf("%w: %d commits in a batch, at most %d", metaapi.ErrInvalid, len(items), metaapi.MaxCommitBatch)
	}
	pre := make([]error, len(items))
	for i := range items {
		pre[i] = s.checkCommit(&items[i].CommitKey)
	}
	kis, errs, werr, err := applyEach(s, pre, func(i int) (*metaapi.KeyInfo, *pebble.Batch, error) {
		it := &items[i]
		return s.commitKeyLocked(it.Bucket, it.Key, &it.CommitKey)
	})
	if err != nil {
		return nil, err
	}
	res := make([]metaapi.CommitResult, len(items))
	for i := range items {
		if err := cmp.Or(errs[i], werr); err != nil && (errs[i] != nil || kis[i] != nil) {
			res[i].Error = apiError(fmt.Sprintf("commit %s/%s", items[i].Bucket, items[i].Key), err)
			continue
		}
		kis[i].Inline = nil // the committer has the value
		res[i].Key = kis[i]
		s.metrics.commits.Inc()
	}
	return res, nil
}

// commitKeyLocked is CommitKey, validated, under s.mu.
func (s *Service) commitKeyLocked(bucket, key string, ck *metaapi.CommitKey) (*metaapi.KeyInfo, *pebble.Batch, error) {
	brec, err := s.bucketOf(bucket, key)
	if err != nil {
		return nil, nil, err
	}
	old, exists, err := s.getKey(bucket, key)
	if err != nil {
		return nil, nil, err
	}
	now := s.cfg.Now()
	if exists && sameVersion(old, ck) {
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
	if err := checkConditions(bucket, key, old, exists, ck.Conditions); err != nil {
		return s.retriedCommit(bucket, key, ck, now, err)
	}
	blocks, err := s.claimable(bucket, key, ck.Blocks)
	if err != nil {
		return s.retriedCommit(bucket, key, ck, now, err)
	}
	rec := keyRecord{Size: ck.Size, CRC32C: ck.CRC32C, Created: now, Blocks: blocks, Inline: ck.Inline, Object: ck.Object}
	// Valid: one batch makes the key visible, consumes the allocations,
	// schedules the old blocks' deletion and updates the counts.
	b := s.db.NewBatch()
	set(b, objectKey(bucket, key), rec.encode())
	s.claim(b, rec.Blocks)
	if exists {
		for _, sb := range old.Blocks {
			s.scheduleDelete(b, blockRef{sb.Container, sb.Local}, reasonReplaced, now)
		}
		brec.Bytes -= old.Size
	} else {
		brec.Keys++
	}
	brec.Bytes += rec.Size
	set(b, bucketKey(bucket), brec.encode())
	s.buckets[bucket] = brec
	if ck.CommitID != "" {
		recordCommitID(b, ck.CommitID, bucket, key, rec)
	}
	return s.keyInfo(bucket, key, rec, now), b, nil
}

// claimable checks that every block was allocated for bucket/key and not
// committed since, and returns them as stored (with their pipelines).
func (s *Service) claimable(bucket, key string, kbs []metaapi.KeyBlock) ([]storedBlock, error) {
	blocks := make([]storedBlock, 0, len(kbs))
	for _, kb := range kbs {
		ref := blockRef{kb.Container, kb.Local}
		a, ok := s.allocs[ref]
		if !ok {
			return nil, fmt.Errorf("%w: block %d/%d was not allocated by this meta service, or was committed already, or its allocation expired", metaapi.ErrInvalid, kb.Container, kb.Local)
		}
		if a.Bucket != bucket || (a.Key != "" && a.Key != key) { // "": allocated for any key of the bucket
			return nil, fmt.Errorf("%w: block %d/%d was allocated for %s/%s, not %s/%s", metaapi.ErrInvalid, kb.Container, kb.Local, a.Bucket, a.Key, bucket, key)
		}
		c := s.containers[kb.Container]
		if kb.Pipeline != 0 && kb.Pipeline != c.rec.Pipeline {
			return nil, fmt.Errorf("%w: block %d/%d is in pipeline %d, not %d", metaapi.ErrInvalid, kb.Container, kb.Local, c.rec.Pipeline, kb.Pipeline)
		}
		blocks = append(blocks, storedBlock{Container: kb.Container, Local: kb.Local, Pipeline: c.rec.Pipeline, Length: kb.Length})
	}
	return blocks, nil
}

// claim consumes the allocations of claimable blocks in b and counts
// their bytes in their containers (closing the full ones).
func (s *Service) claim(b *pebble.Batch, blocks []storedBlock) {
	touched := map[uint64]bool{}
	for _, sb := range blocks {
		del(b, blockKey(prefixAlloc, sb.Container, sb.Local))
		delete(s.allocs, blockRef{sb.Container, sb.Local})
		c := s.containers[sb.Container]
		c.rec.Committed += sb.Length
		touched[sb.Container] = true
	}
	for _, cid := range slices.Sorted(maps.Keys(touched)) {
		c := s.containers[cid]
		set(b, u64key(prefixContainer, cid), c.rec.encode())
		if c.rec.Committed >= s.fullBytes() {
			s.startClose(b, c, fmt.Sprintf("%d bytes committed", c.rec.Committed))
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
func (s *Service) checkBlockList(kbs []metaapi.KeyBlock, size uint64) error {
	if len(kbs) > maxBlocksPerKey {
		return fmt.Errorf("%w: %d blocks, at most %d", metaapi.ErrInvalid, len(kbs), maxBlocksPerKey)
	}
	var sum uint64
	seen := make(map[blockRef]bool, len(kbs))
	for i, kb := range kbs {
		ref := blockRef{kb.Container, kb.Local}
		if seen[ref] {
			return fmt.Errorf("%w: block %d/%d appears twice", metaapi.ErrInvalid, kb.Container, kb.Local)
		}
		seen[ref] = true
		if kb.Length == 0 {
			return fmt.Errorf("%w: block %d (%d/%d) has length 0", metaapi.ErrInvalid, i, kb.Container, kb.Local)
		}
		if kb.Length > s.cfg.ContainerSizeBytes || sum+kb.Length < sum {
			return fmt.Errorf("%w: block %d (%d/%d): length %d is absurd", metaapi.ErrInvalid, i, kb.Container, kb.Local, kb.Length)
		}
		sum += kb.Length
	}
	if sum != size {
		return fmt.Errorf("%w: the blocks hold %d bytes, size says %d", metaapi.ErrInvalid, sum, size)
	}
	return nil
}

func sameVersion(old keyRecord, ck *metaapi.CommitKey) bool {
	if (old.Object == nil) != (ck.Object == nil) || (old.Object != nil && old.Object.ETag != ck.Object.ETag) {
		return false
	}
	if len(ck.Blocks) == 0 && !sameObjectMeta(old.Object, ck.Object) {
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
func sameObjectMeta(a, b *metaapi.ObjectMeta) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.ETag == b.ETag && a.ContentType == b.ContentType && a.ChecksumType == b.ChecksumType && a.Parts == b.Parts &&
		maps.Equal(a.Headers, b.Headers) && maps.Equal(a.UserMeta, b.UserMeta) && maps.Equal(a.Checksums, b.Checksums)
}

// keyInfo is the API form of a key, with its blocks' replicas.
func (s *Service) keyInfo(bucket, key string, rec keyRecord, now time.Time) *metaapi.KeyInfo {
	ki := &metaapi.KeyInfo{Bucket: bucket, Key: key, Size: rec.Size, CRC32C: rec.CRC32C, Created: rec.Created, Blocks: make([]metaapi.KeyBlock, 0, len(rec.Blocks)), Inline: rec.Inline, Object: rec.Object}
	members := map[uint64][]metaapi.Member{} // by container: most keys have many blocks in few containers
	for _, sb := range rec.Blocks {
		kb := metaapi.KeyBlock{BlockRef: metaapi.BlockRef{Container: sb.Container, Local: sb.Local}, Pipeline: sb.Pipeline, Length: sb.Length}
		if p := s.pipelines[sb.Pipeline]; p != nil {
			ms, ok := members[sb.Container]
			if !ok {
				ms = s.readMembers(sb.Container, p, now)
				members[sb.Container] = ms
			}
			kb.Members = slices.Clone(ms)
		}
		ki.Blocks = append(ki.Blocks, kb)
	}
	return ki
}

// GetKey returns a committed key with its blocks and their replicas.
func (s *Service) GetKey(bucket, key string) (*metaapi.KeyInfo, error) {
	return read(s, func() (*metaapi.KeyInfo, error) {
		if _, err := s.bucketOf(bucket, key); err != nil {
			return nil, err
		}
		rec, ok, err := s.getKey(bucket, key)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%w %s/%s", metaapi.ErrNoSuchKey, bucket, key)
		}
		return s.keyInfo(bucket, key, rec, s.cfg.Now()), nil
	})
}

// GetKeys looks a batch of keys up (metaapi.GetsRoute), each as GetKey
// would, under one hold of s.mu for reading, answered once everything
// they may have seen is durable (one wait, or one ReadIndex round, for
// the batch). One result per key; a service that does not serve refuses
// the whole batch.
func (s *Service) GetKeys(names []metaapi.KeyName) ([]metaapi.GetResult, error) {
	if len(names) > metaapi.MaxCommitBatch {
		return nil, fmt.Errorf("%w: %d keys in a batch, at most %d", metaapi.ErrInvalid, len(names), metaapi.MaxCommitBatch)
	}
	return read(s, func() ([]metaapi.GetResult, error) {
		now := s.cfg.Now()
		res := make([]metaapi.GetResult, len(names))
		for i, n := range names {
			what := fmt.Sprintf("get %s/%s", n.Bucket, n.Key)
			if _, err := s.bucketOf(n.Bucket, n.Key); err != nil {
				res[i].Error = apiError(what, err)
				continue
			}
			rec, ok, err := s.getKey(n.Bucket, n.Key)
			if err == nil && !ok {
				err = fmt.Errorf("%w %s/%s", metaapi.ErrNoSuchKey, n.Bucket, n.Key)
			}
			if err != nil {
				res[i].Error = apiError(what, err)
				continue
			}
			res[i].Key = s.keyInfo(n.Bucket, n.Key, rec, now)
		}
		return res, nil
	})
}

// DeleteKey removes a key; its blocks are scheduled for deletion.
func (s *Service) DeleteKey(bucket, key string) error {
	_, err := mutate(s, func() (struct{}, *pebble.Batch, error) {
		brec, err := s.bucketOf(bucket, key)
		if err != nil {
			return struct{}{}, nil, err
		}
		rec, ok, err := s.getKey(bucket, key)
		if err != nil {
			return struct{}{}, nil, err
		}
		if !ok {
			return struct{}{}, nil, fmt.Errorf("%w %s/%s", metaapi.ErrNoSuchKey, bucket, key)
		}
		now := s.cfg.Now()
		b := s.db.NewBatch()
		del(b, objectKey(bucket, key))
		for _, sb := range rec.Blocks {
			s.scheduleDelete(b, blockRef{sb.Container, sb.Local}, reasonDeleted, now)
		}
		brec.Keys--
		brec.Bytes -= rec.Size
		set(b, bucketKey(bucket), brec.encode())
		s.buckets[bucket] = brec
		return struct{}{}, b, nil
	})
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
func (s *Service) List(bucket string, o ListOptions) (*metaapi.KeyList, error) {
	if err := metaapi.ValidBucket(bucket); err != nil {
		return nil, err
	}
	if o.Limit < 0 || o.Limit > metaapi.MaxListLimit {
		return nil, fmt.Errorf("%w: limit %d: want 1..%d", metaapi.ErrInvalid, o.Limit, metaapi.MaxListLimit)
	}
	if o.Limit == 0 {
		o.Limit = metaapi.MaxListLimit
	}
	if len(o.Prefix) > maxKeyBytes || len(o.StartAfter) > maxKeyBytes || len(o.Delimiter) > maxKeyBytes {
		return nil, fmt.Errorf("%w: prefix or start_after longer than %d bytes", metaapi.ErrInvalid, maxKeyBytes)
	}
	return read(s, func() (*metaapi.KeyList, error) { return s.listLocked(bucket, o) })
}

// listLocked is List, validated, under s.mu.
func (s *Service) listLocked(bucket string, o ListOptions) (*metaapi.KeyList, error) {
	if _, ok := s.buckets[bucket]; !ok {
		return nil, fmt.Errorf("%w %s", metaapi.ErrNoSuchBucket, bucket)
	}
	kp := keyPrefix(bucket)
	lo := append(slices.Clone(kp), o.Prefix...)
	hi := prefixEnd(lo)
	if o.Prefix == "" {
		hi = prefixEnd(kp)
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, fmt.Errorf("meta: list %s: %w", bucket, err)
	}
	defer it.Close()
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
				end := prefixEnd(append(slices.Clone(kp), cp...))
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
		rec, err := decodeKey(it.Value())
		if err != nil {
			return nil, fmt.Errorf("meta: key %s/%s: %w", bucket, name, err)
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
// current version (exists false: none).
func checkConditions(bucket, key string, cur keyRecord, exists bool, c metaapi.Conditions) error {
	etag := ""
	if exists && cur.Object != nil {
		etag = cur.Object.ETag
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
