package meta

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/meta/namespace"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/vfs"
)

// The crash-at-every-operation loop of the meta store (the engine's is
// TestCrashAtEveryWrite). A sequential workload runs through the
// service's Go API (the methods the HTTP handlers call) on a MemFS armed
// to take its crash image just before its k-th mutating operation, for
// k = 1, 2, … until the workload finishes before the k-th. The store is
// reopened on that image and must hold a state the workload passed
// through: every namespace change (bucket, key, user, upload, part) is
// one store batch, so the namespace recovered is exactly the one after
// some change, no earlier than the last one acknowledged and no later
// than the last one started before the crash. A call that returned while
// the crash image was not taken yet is acknowledged; one that returned
// after it is a "maybe" (its sync may have come after the image, the
// running MemFS does not fail it).
//
// Besides the namespace (keys with their size, CRC32C, value inline or
// block list, creation time and S3 object; buckets with their counters;
// users; uploads and their parts), the recovered store must account for
// every block (checkBlocks) and still hold every ID an acknowledged
// answer handed out (node registrations, containers and pipelines of
// allocations); a second life on it must not hand them out again, must
// answer a retried commit ID with its first version, and must find its
// own changes back after a second crash.

// keyWant is a key as its commit's answer described it.
type keyWant struct {
	Size    uint64
	CRC32C  uint32
	Created int64 // Unix ms: the store keeps milliseconds
	Inline  []byte
	Blocks  []metaapi.KeyBlock // without Members (filled on reads)
	Object  *metaapi.ObjectMeta
}

// partWant is a committed part; blocks are not listed by ListParts, they
// serve the block accounting only.
type partWant struct {
	Size   uint64
	CRC32C uint32
	ETag   string
	blocks []metaapi.KeyBlock
}

type bucketWant struct {
	Created int64
	Keys    map[string]keyWant
}

// nsState is the namespace as the API shows it.
type nsState struct {
	Buckets map[string]bucketWant
	Users   map[string]string // name → access key
	Uploads map[metaapi.UploadRef]map[uint32]partWant
}

func newNS() nsState {
	return nsState{Buckets: map[string]bucketWant{}, Users: map[string]string{}, Uploads: map[metaapi.UploadRef]map[uint32]partWant{}}
}

// clone copies the maps; the values are never changed in place.
func (st nsState) clone() nsState {
	c := newNS()
	for name, b := range st.Buckets {
		c.Buckets[name] = bucketWant{Created: b.Created, Keys: maps.Clone(b.Keys)}
	}
	c.Users = maps.Clone(st.Users)
	for ref, parts := range st.Uploads {
		c.Uploads[ref] = maps.Clone(parts)
	}
	return c
}

// referenced is every block a key or a part of st holds.
func (st nsState) referenced() map[state.BlockRef]metaapi.KeyBlock {
	m := map[state.BlockRef]metaapi.KeyBlock{}
	for _, b := range st.Buckets {
		for _, k := range b.Keys {
			for _, kb := range k.Blocks {
				m[state.BlockRef{Container: kb.Container, Local: kb.Local}] = kb
			}
		}
	}
	for _, parts := range st.Uploads {
		for _, p := range parts {
			for _, kb := range p.blocks {
				m[state.BlockRef{Container: kb.Container, Local: kb.Local}] = kb
			}
		}
	}
	return m
}

func wantOf(ki *metaapi.KeyInfo, inline []byte) keyWant {
	w := keyWant{Size: ki.Size, CRC32C: ki.CRC32C, Created: ki.Created.UnixMilli(), Object: ki.Object}
	if len(inline) > 0 {
		w.Inline = inline
	}
	for _, kb := range ki.Blocks {
		w.Blocks = append(w.Blocks, metaapi.KeyBlock{BlockRef: kb.BlockRef, Pipeline: kb.Pipeline, Length: kb.Length})
	}
	return w
}

func sameBlock(a, b metaapi.KeyBlock) bool {
	return a.BlockRef == b.BlockRef && a.Pipeline == b.Pipeline && a.Length == b.Length
}

func (w keyWant) String() string {
	return fmt.Sprintf("{%d bytes crc %08x created %d, %d bytes inline, blocks %v, object %+v}", w.Size, w.CRC32C, w.Created, len(w.Inline), w.Blocks, w.Object)
}

// nsDiff lists how got differs from want (nil: equal).
func nsDiff(got, want nsState) []string {
	var d []string
	for _, name := range slices.Sorted(maps.Keys(mergeKeys(got.Buckets, want.Buckets))) {
		g, gok := got.Buckets[name]
		w, wok := want.Buckets[name]
		switch {
		case !gok:
			d = append(d, fmt.Sprintf("bucket %s missing", name))
			continue
		case !wok:
			d = append(d, fmt.Sprintf("bucket %s there, not expected", name))
			continue
		case g.Created != w.Created:
			d = append(d, fmt.Sprintf("bucket %s created %d, want %d", name, g.Created, w.Created))
		}
		for _, key := range slices.Sorted(maps.Keys(mergeKeys(g.Keys, w.Keys))) {
			gk, gok := g.Keys[key]
			wk, wok := w.Keys[key]
			switch {
			case !gok:
				d = append(d, fmt.Sprintf("key %s/%s missing (want %v)", name, key, wk))
			case !wok:
				d = append(d, fmt.Sprintf("key %s/%s there, not expected: %v", name, key, gk))
			case gk.Size != wk.Size || gk.CRC32C != wk.CRC32C || gk.Created != wk.Created || string(gk.Inline) != string(wk.Inline) ||
				!slices.EqualFunc(gk.Blocks, wk.Blocks, sameBlock) || !namespace.SameObjectMeta(gk.Object, wk.Object):
				d = append(d, fmt.Sprintf("key %s/%s is %v, want %v", name, key, gk, wk))
			}
		}
	}
	if !maps.Equal(got.Users, want.Users) {
		d = append(d, fmt.Sprintf("users %v, want %v", got.Users, want.Users))
	}
	for _, ref := range slices.SortedFunc(maps.Keys(mergeKeys(got.Uploads, want.Uploads)), func(a, b metaapi.UploadRef) int {
		return strings.Compare(a.Bucket+"/"+a.Key+"/"+a.UploadID, b.Bucket+"/"+b.Key+"/"+b.UploadID)
	}) {
		g, gok := got.Uploads[ref]
		w, wok := want.Uploads[ref]
		switch {
		case !gok:
			d = append(d, fmt.Sprintf("upload %s/%s %s missing", ref.Bucket, ref.Key, ref.UploadID))
			continue
		case !wok:
			d = append(d, fmt.Sprintf("upload %s/%s %s there, not expected", ref.Bucket, ref.Key, ref.UploadID))
			continue
		}
		for _, n := range slices.Sorted(maps.Keys(mergeKeys(g, w))) {
			gp, gok := g[n]
			wp, wok := w[n]
			if gok != wok || gp.Size != wp.Size || gp.CRC32C != wp.CRC32C || gp.ETag != wp.ETag {
				d = append(d, fmt.Sprintf("upload %s/%s part %d: %v %+v, want %v %+v", ref.Bucket, ref.Key, n, gok, gp, wok, wp))
			}
		}
	}
	return d
}

func mergeKeys[K comparable, V any](a, b map[K]V) map[K]bool {
	m := map[K]bool{}
	for k := range a {
		m[k] = true
	}
	for k := range b {
		m[k] = true
	}
	return m
}

// readNS reads the namespace through the API, checking each bucket's
// counters against its keys.
func readNS(s *Service) (nsState, error) {
	st := newNS()
	bl, err := s.ListBuckets()
	if err != nil {
		return st, err
	}
	for _, b := range bl.Buckets {
		bw := bucketWant{Created: b.Created.UnixMilli(), Keys: map[string]keyWant{}}
		l, err := s.List(b.Name, namespace.ListOptions{Limit: metaapi.MaxListLimit})
		if err != nil {
			return st, err
		}
		if l.Next != "" {
			return st, fmt.Errorf("bucket %s: more than %d keys", b.Name, metaapi.MaxListLimit)
		}
		var bytes uint64
		for _, e := range l.Keys {
			ki, err := s.GetKey(b.Name, e.Key)
			if err != nil {
				return st, fmt.Errorf("listed key %s/%s: %w", b.Name, e.Key, err)
			}
			if ki.Size != e.Size || ki.CRC32C != e.CRC32C {
				return st, fmt.Errorf("key %s/%s: listed %d bytes crc %08x, got %d bytes crc %08x", b.Name, e.Key, e.Size, e.CRC32C, ki.Size, ki.CRC32C)
			}
			bw.Keys[e.Key] = wantOf(ki, ki.Inline)
			bytes += ki.Size
		}
		if b.Keys != uint64(len(l.Keys)) || b.Bytes != bytes {
			return st, fmt.Errorf("bucket %s counts %d keys %d bytes, its keys are %d holding %d bytes", b.Name, b.Keys, b.Bytes, len(l.Keys), bytes)
		}
		st.Buckets[b.Name] = bw
		ul, err := s.ListUploads(&metaapi.ListUploads{Bucket: b.Name})
		if err != nil {
			return st, err
		}
		if ul.Truncated {
			return st, fmt.Errorf("bucket %s: more than a page of uploads", b.Name)
		}
		for _, u := range ul.Uploads {
			pl, err := s.ListParts(&metaapi.ListParts{UploadRef: u.UploadRef})
			if err != nil {
				return st, fmt.Errorf("listed upload %+v: %w", u.UploadRef, err)
			}
			parts := map[uint32]partWant{}
			for _, p := range pl.Parts {
				parts[p.Number] = partWant{Size: p.Size, CRC32C: p.CRC32C, ETag: p.ETag}
			}
			st.Uploads[u.UploadRef] = parts
		}
	}
	ul, err := s.Users()
	if err != nil {
		return st, err
	}
	for _, u := range ul.Users {
		st.Users[u.Name] = u.AccessKey
	}
	return st, nil
}

// crashRun is one life of the workload against a service, with what it
// was told.
type crashRun struct {
	t   *testing.T
	k   int64
	s   *Service
	c   *fakeCluster
	clk *clock
	// fs is the MemFS armed to crash (nil: nothing armed, every answer
	// acknowledged).
	fs *vfs.MemFS

	cur   nsState
	snaps []nsState // snaps[i]: the namespace after the i-th change (snaps[0]: the start)
	ops   []string  // what made each snapshot
	// acked: the last snapshot whose change was acknowledged; started:
	// the last one whose change began before the crash image was taken.
	// The image holds one of snaps[acked..started].
	acked, started int

	// What acknowledged answers handed out, promised never to be handed
	// out again (doc.go: "IDs … are never handed out twice").
	nodes      map[string]uint64       // UUID → node ID
	handed     map[string]uint64       // UUID → node ID, every answer (acknowledged or not)
	blocks     map[state.BlockRef]bool // allocated blocks
	containers map[uint64]uint64       // container → its pipeline
	pipelines  map[uint64][]uint64     // pipeline → its members
	// commitIDs: acknowledged commits naming a commit ID, to be retried.
	commitIDs map[string]idCommit
}

type idCommit struct {
	bucket, key string
	ck          *metaapi.CommitKey
	version     keyWant
}

func newCrashRun(t *testing.T, k int64, s *Service, clk *clock, fs *vfs.MemFS, start nsState) *crashRun {
	return &crashRun{t: t, k: k, s: s, c: &fakeCluster{t: t, s: s, clk: clk}, clk: clk, fs: fs,
		cur: start, snaps: []nsState{start}, ops: []string{"start"},
		nodes: map[string]uint64{}, handed: map[string]uint64{}, blocks: map[state.BlockRef]bool{},
		containers: map[uint64]uint64{}, pipelines: map[uint64][]uint64{}, commitIDs: map[string]idCommit{}}
}

func (r *crashRun) crashed() bool { return r.fs != nil && r.fs.Crashed() != nil }

func (r *crashRun) fatalf(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("k=%d: "+format, append([]any{r.k}, args...)...)
}

// ns runs a namespace change: f calls the service and applies the answer
// to st (a copy of the current state); mark records an intermediate state
// (a batch request's items are each their own store batch). The MemFS
// never fails, so every error is a bug.
func (r *crashRun) ns(what string, f func(st *nsState, mark func()) error) {
	r.t.Helper()
	started := !r.crashed()
	r.clk.Advance(time.Second) // every version its own Created
	st := r.cur.clone()
	mark := func() {
		r.snaps = append(r.snaps, st.clone())
		r.ops = append(r.ops, what+" (part)")
	}
	if err := f(&st, mark); err != nil {
		r.fatalf("%s: %v", what, err)
	}
	r.cur = st
	r.snaps = append(r.snaps, st)
	r.ops = append(r.ops, what)
	if started {
		r.started = len(r.snaps) - 1
	}
	if !r.crashed() {
		r.acked = len(r.snaps) - 1
	}
}

// cl runs a cluster call (no namespace change) and says whether its
// answer was acknowledged.
func (r *crashRun) cl(what string, f func() error) bool {
	r.t.Helper()
	if err := f(); err != nil {
		r.fatalf("%s: %v", what, err)
	}
	return !r.crashed()
}

// beat sends n's heartbeat; a registration's ID is recorded.
func (r *crashRun) beat(n *fakeDN) {
	r.t.Helper()
	registers := n.id == 0
	acked := r.cl("heartbeat of "+n.uuid, func() error { n.beat(); return nil })
	if registers {
		r.handed[n.uuid] = n.id
		if acked {
			r.nodes[n.uuid] = n.id
		}
	}
}

func (r *crashRun) round() {
	r.t.Helper()
	for _, n := range r.c.nodes {
		r.beat(n)
	}
}

func (r *crashRun) tick() {
	r.t.Helper()
	r.cl("tick", r.s.Tick)
}

// alloc allocates a block of length for bucket/key (any key: "").
func (r *crashRun) alloc(bucket, key string, length uint64) metaapi.KeyBlock {
	r.t.Helper()
	var a *metaapi.AllocateResponse
	acked := r.cl("allocate for "+bucket+"/"+key, func() (err error) {
		a, err = r.s.Allocate(&metaapi.AllocateRequest{Bucket: bucket, Key: key, AnyKey: key == ""})
		return err
	})
	if acked {
		r.blocks[state.BlockRef{Container: a.Block.Container, Local: a.Block.Local}] = true
		r.containers[a.Block.Container] = a.Pipeline.ID
		var members []uint64
		for _, m := range a.Pipeline.Members {
			members = append(members, m.NodeID)
		}
		r.pipelines[a.Pipeline.ID] = members
	}
	return metaapi.KeyBlock{BlockRef: a.Block, Pipeline: a.Pipeline.ID, Length: length}
}

func (r *crashRun) createBucket(name string) {
	r.ns("create bucket "+name, func(st *nsState, _ func()) error {
		b, err := r.s.CreateBucket(name)
		if err == nil {
			st.Buckets[name] = bucketWant{Created: b.Created.UnixMilli(), Keys: map[string]keyWant{}}
		}
		return err
	})
}

func (r *crashRun) deleteBucket(name string) {
	r.ns("delete bucket "+name, func(st *nsState, _ func()) error {
		err := r.s.DeleteBucket(name)
		if err == nil {
			delete(st.Buckets, name)
			for ref := range st.Uploads {
				if ref.Bucket == name { // aborted with it
					delete(st.Uploads, ref)
				}
			}
		}
		return err
	})
}

func (r *crashRun) commit(bucket, key string, ck *metaapi.CommitKey) {
	r.ns("commit "+bucket+"/"+key, func(st *nsState, _ func()) error {
		ki, err := r.s.CommitKey(bucket, key, ck)
		if err == nil {
			st.Buckets[bucket].Keys[key] = wantOf(ki, ck.Inline)
			if ck.CommitID != "" && !r.crashed() {
				r.commitIDs[ck.CommitID] = idCommit{bucket, key, ck, wantOf(ki, ck.Inline)}
			}
		}
		return err
	})
}

func (r *crashRun) inline(bucket, key string, seed int64, n int, commitID string) {
	ck := inlineCommit(inlineValue(seed, n))
	ck.CommitID = commitID
	r.commit(bucket, key, ck)
}

// put allocates a block of each length (MiB) for bucket/key and commits
// them.
func (r *crashRun) put(bucket, key string, mib ...uint64) {
	ck := &metaapi.CommitKey{CRC32C: uint32(len(key)) * 7919}
	for _, m := range mib {
		kb := r.alloc(bucket, key, m<<20)
		ck.Blocks = append(ck.Blocks, kb)
		ck.Size += kb.Length
	}
	r.commit(bucket, key, ck)
}

func (r *crashRun) deleteKey(bucket, key string) {
	r.ns("delete "+bucket+"/"+key, func(st *nsState, _ func()) error {
		err := r.s.DeleteKey(bucket, key)
		if err == nil {
			delete(st.Buckets[bucket].Keys, key)
		}
		return err
	})
}

func (r *crashRun) createUser(name, access string) {
	r.ns("create user "+name, func(st *nsState, _ func()) error {
		_, err := r.s.CreateUser(&metaapi.CreateUser{Name: name, AccessKey: access, SecretKey: "secret-of-" + name + "-0123456789"})
		if err == nil {
			st.Users[name] = access
		}
		return err
	})
}

func (r *crashRun) deleteUser(name string) {
	r.ns("delete user "+name, func(st *nsState, _ func()) error {
		err := r.s.DeleteUser(name)
		if err == nil {
			delete(st.Users, name)
		}
		return err
	})
}

func (r *crashRun) createUpload(bucket, key string) metaapi.UploadRef {
	var ref metaapi.UploadRef
	r.ns("create upload "+bucket+"/"+key, func(st *nsState, _ func()) error {
		up, err := r.s.CreateUpload(&metaapi.CreateUpload{Bucket: bucket, Key: key, Object: &metaapi.ObjectMeta{ContentType: "application/x-crash"}})
		if err == nil {
			ref = up.UploadRef
			st.Uploads[ref] = map[uint32]partWant{}
		}
		return err
	})
	return ref
}

func partETag(n uint32, key string) string {
	s := md5.Sum([]byte(fmt.Sprint(key, n)))
	return hex.EncodeToString(s[:])
}

// part commits part n of ref as one block of mib MiB.
func (r *crashRun) part(ref metaapi.UploadRef, n uint32, mib uint64) {
	kb := r.alloc(ref.Bucket, ref.Key, mib<<20)
	req := &metaapi.CommitPart{UploadRef: ref, Number: n, Size: kb.Length, Blocks: []metaapi.KeyBlock{kb}, CRC32C: 1000 + n, ETag: partETag(n, ref.Key)}
	r.ns(fmt.Sprintf("commit part %d of %s/%s", n, ref.Bucket, ref.Key), func(st *nsState, _ func()) error {
		_, err := r.s.CommitPart(req)
		if err == nil {
			st.Uploads[ref][n] = partWant{Size: req.Size, CRC32C: req.CRC32C, ETag: req.ETag, blocks: req.Blocks}
		}
		return err
	})
}

func (r *crashRun) complete(ref metaapi.UploadRef, parts ...uint32) {
	req := &metaapi.CompleteUpload{UploadRef: ref}
	for _, n := range parts {
		req.Parts = append(req.Parts, metaapi.CompletePart{Number: n, ETag: partETag(n, ref.Key)})
	}
	r.ns("complete "+ref.Bucket+"/"+ref.Key, func(st *nsState, _ func()) error {
		ki, err := r.s.CompleteUpload(req)
		if err == nil {
			st.Buckets[ref.Bucket].Keys[ref.Key] = wantOf(ki, nil)
			delete(st.Uploads, ref)
		}
		return err
	})
}

func (r *crashRun) abort(ref metaapi.UploadRef) {
	r.ns("abort "+ref.Bucket+"/"+ref.Key, func(st *nsState, _ func()) error {
		err := r.s.AbortUpload(ref)
		if err == nil {
			delete(st.Uploads, ref)
		}
		return err
	})
}

// firstLife: three datanodes register and get a pipeline, then a few
// dozen namespace changes of every kind, two flushes of the memtable (as
// a full one would be flushed: sstables, blob files, the manifest, a new
// WAL) and ticks (containers filled by commits close; the next
// allocation opens a new one: the container counter moves).
func (r *crashRun) firstLife() {
	for range 3 {
		n := &fakeDN{c: r.c, uuid: fmt.Sprintf("uuid-%d", len(r.c.nodes)+1), addr: fmt.Sprintf("127.0.0.1:%d", 20001+len(r.c.nodes)),
			pipelines: map[uint64]*metaapi.Pipeline{}, conts: map[uint64]*metaapi.ContainerReport{},
			noAck: true} // deletions stay pending: the block accounting expects them
		r.c.nodes = append(r.c.nodes, n)
		r.beat(n)
	}
	r.tick()
	r.round() // join_pipeline
	r.round() // they report it: allocatable

	r.createBucket("alpha")
	r.createBucket("beta")
	r.createUser("alice", "AKALICE000000001")
	r.inline("alpha", "i0", 1, 100, "")
	r.inline("alpha", "i1", 2, 3000, "") // a blob file's value at the flush
	r.inline("alpha", "i2", 3, 1, "")
	r.inline("alpha", "hot", 4, 500, "crash-commit-id-1")
	r.put("beta", "b0", 8, 8)
	r.put("beta", "b1", 8)
	items := []metaapi.BatchedCommit{
		{Bucket: "alpha", Key: "j0", CommitKey: *inlineCommit(inlineValue(5, 200))},
		{Bucket: "beta", Key: "j1", CommitKey: *inlineCommit(inlineValue(6, 2000))},
		{Bucket: "alpha", Key: "j0", CommitKey: *inlineCommit(inlineValue(7, 300))},
	}
	r.ns("commit batch", func(st *nsState, mark func()) error {
		res, err := r.s.CommitKeys(items)
		if err != nil {
			return err
		}
		for i, it := range items {
			if res[i].Error != nil {
				return res[i].Error
			}
			if i > 0 {
				mark() // each item is its own store batch
			}
			st.Buckets[it.Bucket].Keys[it.Key] = wantOf(res[i].Key, it.Inline)
		}
		return nil
	})
	r.cl("flush", r.s.Store.Flush)
	r.inline("alpha", "hot", 8, 600, "crash-commit-id-2")
	r.put("beta", "b0", 8, 8, 8) // replaces 2 blocks
	r.put("beta", "b2", 8, 8)    // 64 MiB committed: the container closes
	r.tick()
	r.put("beta", "b3", 8) // in a new container
	r.put("alpha", "i1", 4)
	r.inline("beta", "b1", 9, 700, "") // blocks → inline
	r.deleteKey("alpha", "i0")
	r.deleteKey("beta", "b2")
	pre := r.alloc("beta", "", 2<<20) // for any key of the bucket
	r.commit("beta", "any", &metaapi.CommitKey{Size: pre.Length, CRC32C: 42, Blocks: []metaapi.KeyBlock{pre}})

	r.createBucket("gamma")
	mp := r.createUpload("gamma", "mp")
	r.part(mp, 1, 5) // MinPartBytes: not the last
	r.part(mp, 2, 3)
	mp2 := r.createUpload("gamma", "mp2")
	r.part(mp2, 1, 1)
	r.part(mp2, 2, 1)
	r.complete(mp2, 2) // part 1's block to delete
	r.complete(mp, 1, 2)
	left := r.createUpload("gamma", "left")
	r.part(left, 1, 1)
	ab := r.createUpload("gamma", "aborted")
	r.part(ab, 1, 1)
	r.abort(ab)
	r.createUser("bob", "AKBOB00000000002")
	r.deleteUser("bob")

	r.createBucket("delta")
	r.inline("delta", "x", 10, 50, "")
	r.createUpload("delta", "u")
	r.deleteKey("delta", "x")
	r.deleteBucket("delta") // its upload goes with it
	r.tick()
	r.round() // delete_blocks delivered, not acknowledged
	r.inline("alpha", "i2", 11, 1500, "")
	r.put("gamma", "mp", 1) // replaces the multipart key
	r.tick()
}

// checkBlocks checks the recovered service's blocks against the
// namespace it holds (st, reached through history): a block is in exactly
// one place (a key or a part, a pending allocation, a pending deletion);
// an acknowledged allocation is in one of them; a block committed once
// and no longer referenced is pending deletion (the datanodes acknowledge
// none); each container's committed bytes are those of every block ever
// committed into it.
func checkBlocks(s *Service, st nsState, history []nsState, acked map[state.BlockRef]bool) error {
	s.Mu.RLock()
	defer s.Mu.RUnlock()
	ref := st.referenced()
	pendingDelete := func(b state.BlockRef) bool { return s.Deletes[b.Container][b.Local] != nil }
	for b := range ref {
		if _, ok := s.Allocs[b]; ok {
			return fmt.Errorf("block %v is committed and still a pending allocation", b)
		}
		if pendingDelete(b) {
			return fmt.Errorf("block %v is committed and scheduled for deletion", b)
		}
	}
	for b := range s.Allocs {
		if pendingDelete(b) {
			return fmt.Errorf("block %v is a pending allocation and scheduled for deletion", b)
		}
	}
	for b := range acked {
		if _, ok := ref[b]; !ok && !pendingDelete(b) {
			if _, ok := s.Allocs[b]; !ok {
				return fmt.Errorf("acknowledged allocation of block %v: neither committed, pending nor scheduled for deletion", b)
			}
		}
	}
	ever := map[state.BlockRef]metaapi.KeyBlock{}
	for _, h := range history {
		maps.Copy(ever, h.referenced())
	}
	committed := map[uint64]uint64{}
	for b, kb := range ever {
		committed[b.Container] += kb.Length
		if _, ok := ref[b]; !ok && !pendingDelete(b) {
			return fmt.Errorf("block %v, committed and no longer referenced, is not scheduled for deletion", b)
		}
	}
	for id, c := range s.ContainerByID {
		if c.Rec.Committed != committed[id] {
			return fmt.Errorf("container %d counts %d committed bytes, its committed blocks hold %d", id, c.Rec.Committed, committed[id])
		}
	}
	return nil
}

// checkIDs checks that what r's acknowledged answers handed out is in s:
// node registrations, containers and pipelines of allocations.
func (r *crashRun) checkIDs(s *Service) {
	r.t.Helper()
	nl := must[*metaapi.NodeList](r.t)(s.Nodes())
	listed := map[string]uint64{}
	for _, n := range nl.Nodes {
		listed[n.UUID] = n.NodeID
		if id, ok := r.handed[n.UUID]; !ok || id != n.NodeID {
			r.fatalf("node %d (%s) after the crash; the workload was handed %d for it", n.NodeID, n.UUID, id)
		}
	}
	for uuid, id := range r.nodes {
		if listed[uuid] != id {
			r.fatalf("acknowledged registration of %s as node %d lost (listed: %v)", uuid, id, listed)
		}
	}
	conts := map[uint64]uint64{}
	for _, ci := range must[*metaapi.ContainerList](r.t)(s.Containers()).Containers {
		conts[ci.ID] = ci.Pipeline
	}
	for id, p := range r.containers {
		if got, ok := conts[id]; !ok || got != p {
			r.fatalf("acknowledged container %d (pipeline %d): after the crash %v %d", id, p, ok, got)
		}
	}
	pipes := map[uint64][]uint64{}
	for _, p := range must[*metaapi.PipelineList](r.t)(s.Pipelines()).Pipelines {
		for _, m := range p.Members {
			pipes[p.ID] = append(pipes[p.ID], m.NodeID)
		}
	}
	for id, members := range r.pipelines {
		if !slices.Equal(pipes[id], members) {
			r.fatalf("acknowledged pipeline %d of %v: after the crash %v", id, members, pipes[id])
		}
	}
}

// checkRecovered checks the service reopened on the crash image and
// returns the snapshot it holds.
func (r *crashRun) checkRecovered(s *Service) int {
	r.t.Helper()
	got, err := readNS(s)
	if err != nil {
		r.fatalf("after the crash: %v", err)
	}
	j := -1
	for i := r.started; i >= r.acked; i-- {
		if nsDiff(got, r.snaps[i]) == nil {
			j = i
			break
		}
	}
	if j < 0 {
		r.fatalf("after the crash the namespace is none the workload passed through between change %d (%s, the last acknowledged) and %d (%s, the last started before the crash); against change %d:\n%s",
			r.acked, r.ops[r.acked], r.started, r.ops[r.started], r.acked, strings.Join(nsDiff(got, r.snaps[r.acked]), "\n"))
	}
	if err := checkBlocks(s, r.snaps[j], r.snaps[:j+1], r.blocks); err != nil {
		r.fatalf("after the crash (at change %d, %s): %v", j, r.ops[j], err)
	}
	r.checkIDs(s)
	return j
}

// secondLife continues on the recovered service s2 (on img): the
// datanodes come back (those whose registration was not acknowledged
// register again), a new one registers, commit IDs acknowledged before
// the crash are retried, new changes are made; no ID acknowledged before
// the crash is handed out again. Then a second crash (strict model):
// everything of the second life is back.
func (r *crashRun) secondLife(s2 *Service, img *vfs.MemFS, cfg state.Config, j int) {
	r.t.Helper()
	r2 := newCrashRun(r.t, r.k, s2, r.clk, nil, r.snaps[j].clone())
	maps.Copy(r2.handed, r.handed)
	maps.Copy(r2.nodes, r.nodes)
	// Every block the recovered store knows, and every one handed out
	// acknowledged: none may be allocated again.
	known := maps.Clone(r.blocks)
	for b := range r.snaps[j].referenced() {
		known[b] = true
	}
	s2.Mu.RLock()
	for b := range s2.Allocs {
		known[b] = true
	}
	for cid, m := range s2.Deletes {
		for local := range m {
			known[state.BlockRef{Container: cid, Local: local}] = true
		}
	}
	before := map[uint64]bool{}
	for id := range s2.ContainerByID {
		before[id] = true
	}
	s2.Mu.RUnlock()
	ackedIDs := map[uint64]string{}
	for uuid, id := range r.nodes {
		ackedIDs[id] = uuid
	}

	for _, n := range r.c.nodes {
		n2 := &fakeDN{c: r2.c, uuid: n.uuid, addr: n.addr, pipelines: maps.Clone(n.pipelines), conts: map[uint64]*metaapi.ContainerReport{}, noAck: true}
		if id, ok := r.nodes[n.uuid]; ok {
			n2.id = id // it knows its ID
		}
		r2.c.nodes = append(r2.c.nodes, n2)
	}
	r2.c.nodes = append(r2.c.nodes, &fakeDN{c: r2.c, uuid: "uuid-life2", addr: "127.0.0.1:20099",
		pipelines: map[uint64]*metaapi.Pipeline{}, conts: map[uint64]*metaapi.ContainerReport{}, noAck: true})
	r2.round()
	for _, n := range r2.c.nodes {
		if uuid, ok := ackedIDs[n.id]; ok && uuid != n.uuid {
			r.fatalf("after the crash %s registered as node %d, acknowledged to %s before it", n.uuid, n.id, uuid)
		}
	}
	r2.tick()
	r2.round()
	r2.round()

	// Commit IDs: a retry is answered with the first commit's version and
	// changes nothing, even once the key was replaced.
	for _, id := range slices.Sorted(maps.Keys(r.commitIDs)) {
		ic := r.commitIDs[id]
		cur := must[*metaapi.KeyInfo](r.t)(s2.GetKey(ic.bucket, ic.key))
		ki, err := s2.CommitKey(ic.bucket, ic.key, ic.ck)
		if err != nil || ki.Size != ic.version.Size || ki.CRC32C != ic.version.CRC32C || ki.Created.UnixMilli() != ic.version.Created {
			r.fatalf("retry of commit ID %s after the crash: %v %+v, want %v", id, err, ki, ic.version)
		}
		after := must[*metaapi.KeyInfo](r.t)(s2.GetKey(ic.bucket, ic.key))
		if after.CRC32C != cur.CRC32C || string(after.Inline) != string(cur.Inline) || !after.Created.Equal(cur.Created) {
			r.fatalf("retry of commit ID %s after the crash changed %s/%s", id, ic.bucket, ic.key)
		}
	}

	r2.createBucket("life2")
	for i := range 8 { // 64 MiB: a new container
		r2.put("life2", fmt.Sprintf("p%d", i), 8)
	}
	r2.inline("life2", "v", 12, 2500, "crash-commit-id-life2")
	r2.inline("life2", "v", 13, 100, "")
	r2.deleteKey("life2", "p0")
	r2.createUser("carol", "AKCAROL000000003")
	r2.tick()
	for b := range r2.blocks {
		if known[b] {
			r.fatalf("block %v allocated again after the crash", b)
		}
	}
	for id := range r2.containers {
		if _, ok := r.containers[id]; ok && !before[id] {
			r.fatalf("container %d, acknowledged before the crash, made again after it", id)
		}
	}

	again := img.CrashClone(0, nil)
	if err := s2.Close(); err != nil {
		r.fatalf("close after the second life: %v", err)
	}
	cfg.FS = again
	s3, err := Open(cfg)
	if err != nil {
		r.fatalf("reopen after the second crash: %v", err)
	}
	defer mustClose(r.t, s3)
	got, err := readNS(s3)
	if err != nil {
		r.fatalf("after the second crash: %v", err)
	}
	if d := nsDiff(got, r2.cur); d != nil {
		r.fatalf("after the second crash, the second life's changes (all acknowledged):\n%s", strings.Join(d, "\n"))
	}
	// The accounting spans both lives: the first up to the state
	// recovered, then the second.
	history := append(slices.Clone(r.snaps[:j+1]), r2.snaps...)
	if err := checkBlocks(s3, r2.cur, history, r2.blocks); err != nil {
		r.fatalf("after the second crash: %v", err)
	}
	r2.checkIDs(s3)
}

// crashConfig: a container holds 8 blocks of 8 MiB of the workload
// before it closes; datanodes never go STALE (the clock moves a second a
// change); a deletion is delivered once and never given up on.
func crashConfig(clk *clock, fs *vfs.MemFS) state.Config {
	cfg := testConfig("/meta", clk)
	cfg.FS = fs
	cfg.PipelinesPerNode = 1
	cfg.ContainerSizeBytes = 64 << 20
	cfg.StaleAfter, cfg.DeadAfter = time.Hour, 2*time.Hour
	cfg.DeleteRedeliverAfter = time.Hour
	return cfg
}

// crashAtOp runs the workload on a MemFS that takes its crash image just
// before its k-th mutating operation (Open's included: a crash while the
// store is created), then checks the recovery and lives a second life. It
// reports whether the workload finished before the k-th operation.
func crashAtOp(t *testing.T, k int64, keepPct int) (finished bool) {
	t.Helper()
	fs := vfs.NewMem()
	fs.CrashAtOp(k, keepPct, k)
	clk := newClock()
	cfg := crashConfig(clk, fs)
	s, err := Open(cfg)
	if err != nil {
		t.Fatalf("k=%d: open: %v", k, err)
	}
	r := newCrashRun(t, k, s, clk, fs, newNS())
	r.firstLife()
	if err := s.Close(); err != nil {
		t.Fatalf("k=%d: close: %v", k, err)
	}
	img := fs.Crashed()
	if img == nil {
		return true
	}
	cfg.FS = img
	s2, err := Open(cfg)
	if err != nil {
		t.Fatalf("k=%d: reopen after the crash: %v", k, err)
	}
	defer mustClose(t, s2)
	j := r.checkRecovered(s2)
	r.secondLife(s2, img, cfg, j)
	return false
}

// TestMetaCrashAtEveryOperation crashes the meta store's filesystem at
// its k-th mutating operation for k = 1, 2, … until the workload
// finishes before the k-th, in the strict model (exactly what was
// synced) and a journaled one (unsynced writes kept at random, namespace
// operations as an in-order prefix). See crashRun.
func TestMetaCrashAtEveryOperation(t *testing.T) {
	for _, mode := range []struct {
		name    string
		keepPct int
	}{
		{"strict", 0},
		{"journaled-keep-50%", 50},
	} {
		t.Run(mode.name, func(t *testing.T) {
			// Bound: the workload makes about 200 operations (Open's
			// included), a few more or fewer from run to run: the items
			// of the commit batch are synced together or apart (group
			// commit), as the WAL's flusher takes them.
			const kMax = 2000
			k := int64(1)
			for ; k <= kMax; k++ {
				if crashAtOp(t, k, mode.keepPct) {
					break
				}
			}
			if k > kMax {
				t.Fatalf("workload still running at k=%d", kMax)
			}
			t.Logf("crashed at every one of %d mutating operations", k-1)
		})
	}
}
