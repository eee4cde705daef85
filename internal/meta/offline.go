package meta

// Offline writer: a new meta store written directly, without a running
// service (the offline data generator, internal/gen, uses it).
//
// It writes the same records as the service (records.go), in the same
// Pebble layout (Dir/pebble), so that Open loads the result as if the
// service had made it: registered nodes, CLOSED pipelines, CLOSED
// containers, buckets and committed keys. No allocation or pending
// deletion record is ever written.
//
// Invariants:
//   - CreateOffline refuses a store that holds any record: it only ever
//     creates a new store, never changes an existing one.
//   - Every Add validates its arguments (with the service's own validators:
//     metaapi.Heartbeat.Validate for a node, ValidBucket, ValidKey, the
//     commit rules for a key's blocks) before it changes anything; a failed
//     Add changes nothing, in memory or in the batch.
//   - References point backwards: a pipeline's members are added nodes, a
//     container's pipeline an added pipeline, a key's bucket and blocks'
//     containers added before the key. A key's block lies in its container
//     (local ID below the container's next local ID), is used by one key
//     only, and the blocks of a container's keys add up to at most its
//     committed bytes.
//   - The counters record (next IDs, past the highest used) and the bucket
//     records (with their key counts) are written by Close only, in its
//     final batch, which is committed synced. Earlier batches are committed
//     unsynced (they reach the disk with the last one: Pebble's log is
//     sequential). A store whose writer did not Close has key, node or
//     pipeline records but no counters: Open refuses it (a record's ID at
//     or past the default next ID is corrupt), so a crash in the middle is
//     never mistaken for a complete store.
//
// Concurrency: an OfflineWriter is used by one goroutine at a time.

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/vfs"
)

// offlineBatchBytes bounds one unsynced batch of the offline writer.
const offlineBatchBytes = 4 << 20

// offlineContainer is what the writer keeps of an added container to
// validate the keys that reference it.
type offlineContainer struct {
	pipeline   uint64
	nextLocal  uint64
	committed  uint64
	referenced uint64 // bytes of the keys' blocks in it so far
}

// OfflineWriter writes a new meta store. See CreateOffline.
type OfflineWriter struct {
	dir  string
	db   *pebble.DB
	b    *pebble.Batch
	now  time.Time
	done bool
	// failed is set by a Pebble error: the store is then incomplete and
	// every later call fails.
	failed error

	ctr        state.Counters
	nodes      map[uint64]bool
	uuids      map[string]bool
	pipelines  map[uint64]bool
	containers map[uint64]*offlineContainer
	buckets    map[string]*state.BucketRecord
	bucketList []string // in the order added
	keys       map[string]bool
	blocks     map[state.BlockRef]bool
}

// CreateOffline creates a new meta store in dir (the Config.Dir of Open;
// created when missing) for an OfflineWriter. It refuses a store that
// already holds a record. Every record gets the current time as its
// registration, creation or close time. Close must be called: only then
// is the store complete and durable.
func CreateOffline(dir string) (*OfflineWriter, error) {
	if dir == "" {
		return nil, errors.New("meta: offline: no directory")
	}
	db, err := state.OpenStore(vfs.Default, dir, slog.Default())
	if err != nil {
		return nil, fmt.Errorf("meta: offline: %w", err)
	}
	it, err := db.NewIter(nil)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("meta: offline: %s: %w", dir, err), db.Close())
	}
	found := it.First()
	err = errors.Join(it.Error(), it.Close())
	if err != nil || found {
		cerr := db.Close()
		if err == nil {
			err = fmt.Errorf("%w: %s already holds a meta store: the offline writer only creates new ones", metaapi.ErrExists, dir)
		}
		return nil, fmt.Errorf("meta: offline: %w", errors.Join(err, cerr))
	}
	return &OfflineWriter{
		dir: dir, db: db, b: db.NewBatch(), now: time.Now().UTC(),
		ctr:   state.Counters{NextNode: 1, NextPipeline: 1, NextContainer: 1},
		nodes: map[uint64]bool{}, uuids: map[string]bool{}, pipelines: map[uint64]bool{},
		containers: map[uint64]*offlineContainer{}, buckets: map[string]*state.BucketRecord{},
		keys: map[string]bool{}, blocks: map[state.BlockRef]bool{},
	}, nil
}

func (w *OfflineWriter) usable() error {
	if w.done {
		return errors.New("meta: offline writer closed")
	}
	if w.failed != nil {
		return fmt.Errorf("meta: offline writer failed earlier: %w", w.failed)
	}
	return nil
}

func offlineInvalid(format string, args ...any) error {
	return fmt.Errorf("meta: offline: %w: %s", metaapi.ErrInvalid, fmt.Sprintf(format, args...))
}

// put adds k → v to the current batch and commits it (unsynced) once it
// holds offlineBatchBytes.
func (w *OfflineWriter) put(k, v []byte) error {
	state.Set(w.b, k, v)
	if w.b.Len() < offlineBatchBytes {
		return nil
	}
	err := w.b.Commit(pebble.NoSync)
	state.CloseBatch(w.b)
	w.b = w.db.NewBatch()
	if err != nil {
		w.failed = err
		return fmt.Errorf("meta: offline: store commit: %w", err)
	}
	return nil
}

// AddNode registers datanode nodeID (1..MaxNodeID) with its UUID and
// data-path address, validated as a heartbeat is. IDs and UUIDs are unique.
func (w *OfflineWriter) AddNode(nodeID uint64, uuid, addr string) error {
	if err := w.usable(); err != nil {
		return err
	}
	if nodeID == 0 || nodeID > state.MaxNodeID {
		return offlineInvalid("node ID %d not in [1, %d]", nodeID, state.MaxNodeID)
	}
	hb := metaapi.Heartbeat{UUID: uuid, NodeID: nodeID, Addr: addr}
	if err := hb.Validate(); err != nil {
		return fmt.Errorf("meta: offline: node %d: %w", nodeID, err)
	}
	if w.nodes[nodeID] {
		return fmt.Errorf("meta: offline: %w: node %d", metaapi.ErrExists, nodeID)
	}
	if w.uuids[uuid] {
		return fmt.Errorf("meta: offline: %w: a node with UUID %s", metaapi.ErrExists, uuid)
	}
	rec := state.NodeRecord{ID: nodeID, Registered: w.now, UUID: uuid, Addr: addr}
	if err := w.put(state.U64Key(state.PrefixNode, nodeID), rec.Encode()); err != nil {
		return err
	}
	w.nodes[nodeID], w.uuids[uuid] = true, true
	w.ctr.NextNode = max(w.ctr.NextNode, nodeID+1)
	return nil
}

// AddPipeline adds pipeline id, CLOSED (created and closed now), of
// PipelineSize distinct added nodes.
func (w *OfflineWriter) AddPipeline(id uint64, members []uint64) error {
	if err := w.usable(); err != nil {
		return err
	}
	if id == 0 {
		return offlineInvalid("pipeline ID 0")
	}
	if w.pipelines[id] {
		return fmt.Errorf("meta: offline: %w: pipeline %d", metaapi.ErrExists, id)
	}
	if len(members) != state.PipelineSize {
		return offlineInvalid("pipeline %d: %d members, want %d", id, len(members), state.PipelineSize)
	}
	for i, m := range members {
		if !w.nodes[m] {
			return offlineInvalid("pipeline %d: member %d is not an added node", id, m)
		}
		if slices.Contains(members[:i], m) {
			return offlineInvalid("pipeline %d: member %d twice", id, m)
		}
	}
	rec := state.PipelineRecord{ID: id, State: state.PipelineClosed, Created: w.now, Closed: w.now, Members: slices.Clone(members)}
	if err := w.put(state.U64Key(state.PrefixPipeline, id), rec.Encode()); err != nil {
		return err
	}
	w.pipelines[id] = true
	w.ctr.NextPipeline = max(w.ctr.NextPipeline, id+1)
	return nil
}

// AddContainer adds container id, CLOSED, of an added pipeline, holding
// committedBytes of blocks with local IDs below nextLocal (≥ 1).
func (w *OfflineWriter) AddContainer(id, pipeline uint64, committedBytes, nextLocal uint64) error {
	if err := w.usable(); err != nil {
		return err
	}
	switch {
	case id == 0:
		return offlineInvalid("container ID 0")
	case w.containers[id] != nil:
		return fmt.Errorf("meta: offline: %w: container %d", metaapi.ErrExists, id)
	case !w.pipelines[pipeline]:
		return offlineInvalid("container %d: pipeline %d is not an added pipeline", id, pipeline)
	case nextLocal == 0:
		return offlineInvalid("container %d: next local ID 0 (local IDs start at 1)", id)
	}
	rec := state.ContainerRecord{ID: id, Pipeline: pipeline, State: state.ContainerClosed, Created: w.now, NextLocal: nextLocal, Committed: committedBytes}
	if err := w.put(state.U64Key(state.PrefixContainer, id), rec.Encode()); err != nil {
		return err
	}
	w.containers[id] = &offlineContainer{pipeline: pipeline, nextLocal: nextLocal, committed: committedBytes}
	w.ctr.NextContainer = max(w.ctr.NextContainer, id+1)
	return nil
}

// AddBucket adds an empty bucket (its record, with the counts of the keys
// added to it, is written by Close).
func (w *OfflineWriter) AddBucket(name string) error {
	if err := w.usable(); err != nil {
		return err
	}
	if err := metaapi.ValidBucket(name); err != nil {
		return fmt.Errorf("meta: offline: %w", err)
	}
	if w.buckets[name] != nil {
		return fmt.Errorf("meta: offline: %w: bucket %s", metaapi.ErrExists, name)
	}
	w.buckets[name] = &state.BucketRecord{Created: w.now}
	w.bucketList = append(w.bucketList, name)
	return nil
}

// AddKey adds the committed key bucket/key: size bytes whose CRC32C is
// crc, in the given blocks (in value order), and counts it in its bucket.
// The rules are the commit rules (see the metaapi package comment) with
// "allocated" read as "in an added container, below its next local ID, and
// in no other key"; a block's Pipeline is its container's (0: filled in).
func (w *OfflineWriter) AddKey(bucket, key string, size uint64, crc uint32, blocks []metaapi.KeyBlock) error {
	if err := w.usable(); err != nil {
		return err
	}
	if err := metaapi.ValidBucket(bucket); err != nil {
		return fmt.Errorf("meta: offline: %w", err)
	}
	if err := metaapi.ValidKey(key); err != nil {
		return fmt.Errorf("meta: offline: %w", err)
	}
	brec := w.buckets[bucket]
	if brec == nil {
		return fmt.Errorf("meta: offline: %w %s", metaapi.ErrNoSuchBucket, bucket)
	}
	ok := string(state.ObjectKey(bucket, key))
	if w.keys[ok] {
		return fmt.Errorf("meta: offline: %w: key %s/%s", metaapi.ErrExists, bucket, key)
	}
	if len(blocks) > state.MaxBlocksPerKey {
		return offlineInvalid("key %s/%s: %d blocks, at most %d", bucket, key, len(blocks), state.MaxBlocksPerKey)
	}
	rec := state.KeyRecord{Size: size, CRC32C: crc, Created: w.now, Blocks: make([]state.StoredBlock, 0, len(blocks))}
	seen := make(map[state.BlockRef]bool, len(blocks))
	adds := map[uint64]uint64{} // container → bytes this key adds to it
	var sum uint64
	for i, kb := range blocks {
		ref := state.BlockRef{Container: kb.Container, Local: kb.Local}
		c := w.containers[kb.Container]
		switch {
		case c == nil:
			return offlineInvalid("key %s/%s: block %d: container %d is not an added container", bucket, key, i, kb.Container)
		case kb.Local == 0 || kb.Local >= c.nextLocal:
			return offlineInvalid("key %s/%s: block %d: local ID %d of container %d not in [1, %d)", bucket, key, i, kb.Local, kb.Container, c.nextLocal)
		case kb.Pipeline != 0 && kb.Pipeline != c.pipeline:
			return offlineInvalid("key %s/%s: block %d/%d is in pipeline %d, not %d", bucket, key, kb.Container, kb.Local, c.pipeline, kb.Pipeline)
		case kb.Length == 0:
			return offlineInvalid("key %s/%s: block %d (%d/%d) has length 0", bucket, key, i, kb.Container, kb.Local)
		case seen[ref] || w.blocks[ref]:
			return offlineInvalid("key %s/%s: block %d/%d is used twice", bucket, key, kb.Container, kb.Local)
		case sum+kb.Length < sum || c.referenced+adds[kb.Container]+kb.Length < c.referenced:
			return offlineInvalid("key %s/%s: block %d: length %d is absurd", bucket, key, i, kb.Length)
		case c.referenced+adds[kb.Container]+kb.Length > c.committed:
			return offlineInvalid("key %s/%s: block %d/%d: the keys' blocks in container %d pass its %d committed bytes", bucket, key, kb.Container, kb.Local, kb.Container, c.committed)
		}
		seen[ref] = true
		adds[kb.Container] += kb.Length
		sum += kb.Length
		rec.Blocks = append(rec.Blocks, state.StoredBlock{Container: kb.Container, Local: kb.Local, Pipeline: c.pipeline, Length: kb.Length})
	}
	if sum != size {
		return offlineInvalid("key %s/%s: the blocks hold %d bytes, size says %d", bucket, key, sum, size)
	}
	if brec.Bytes+size < brec.Bytes {
		return offlineInvalid("bucket %s: byte count overflows", bucket)
	}
	if err := w.put([]byte(ok), rec.Encode()); err != nil {
		return err
	}
	w.keys[ok] = true
	for ref := range seen {
		w.blocks[ref] = true
	}
	for cid, n := range adds {
		w.containers[cid].referenced += n
	}
	brec.Keys++
	brec.Bytes += size
	return nil
}

// Close writes the counters and the bucket records and commits the last
// batch synced, then closes the store. After a failed Add (a Pebble error)
// or without Close, the store is incomplete: Open refuses it.
func (w *OfflineWriter) Close() error {
	if w.done {
		return nil
	}
	w.done = true
	defer state.CloseBatch(w.b)
	if w.failed != nil {
		return errors.Join(fmt.Errorf("meta: offline: store incomplete: %w", w.failed), w.db.Close())
	}
	for _, name := range w.bucketList {
		state.Set(w.b, state.BucketKey(name), w.buckets[name].Encode())
	}
	state.Set(w.b, state.CounterKey(), w.ctr.Encode())
	if err := w.b.Commit(pebble.Sync); err != nil {
		return errors.Join(fmt.Errorf("meta: offline: final commit in %s: %w", w.dir, err), w.db.Close())
	}
	if err := w.db.Close(); err != nil {
		return fmt.Errorf("meta: offline: close store in %s: %w", w.dir, err)
	}
	return nil
}
