// Package fakemeta is an in-memory stand-in for Spindle's meta service, for
// tests of the key client and of the commands: buckets, keys committed
// atomically, prefix listing with pages, and block allocation round robin
// over a fixed set of pipelines (static ones, such as localcluster's). It
// implements keyclient.Meta and follows metaapi's rules (names, error
// values, excluded pipelines); it keeps nothing on disk, has no datanode
// registry and never deletes blocks.
//
// Invariants: a key is visible only once CommitKey returned; a committed
// key's blocks add up to its size and name known pipelines; a listing is in
// key order and its pages do not overlap.
//
// Concurrency: a Meta is safe for concurrent use (one mutex).
package fakemeta

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// Meta is the fake meta service.
type Meta struct {
	mu        sync.Mutex
	buckets   map[string]*bucket
	pipelines []metaapi.Pipeline
	rr        int
	// next local block ID per pipeline (each pipeline has one container,
	// whose ID is the pipeline's).
	nextLocal map[uint64]uint64
	// Allocations and Commits count the calls that succeeded;
	// InlineCommits the commits of a value inline among them.
	Allocations, Commits, InlineCommits int
	// AllocateHook, when set, is called (without the lock) before each
	// allocation; its error is returned instead.
	AllocateHook func(req metaapi.AllocateRequest) error
}

type bucket struct {
	info metaapi.Bucket
	keys map[string]metaapi.KeyInfo
}

// New returns a fake meta service allocating blocks on pipelines.
func New(pipelines ...metaapi.Pipeline) *Meta {
	return &Meta{buckets: map[string]*bucket{}, pipelines: slices.Clone(pipelines), nextLocal: map[uint64]uint64{}}
}

// SetPipelines replaces the pipelines blocks are allocated on (and whose
// members GetKey reports).
func (m *Meta) SetPipelines(ps ...metaapi.Pipeline) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pipelines = slices.Clone(ps)
}

// Pipelines returns the pipelines.
func (m *Meta) Pipelines() []metaapi.Pipeline {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.pipelines)
}

func (m *Meta) pipeline(id uint64) *metaapi.Pipeline {
	for i := range m.pipelines {
		if m.pipelines[i].ID == id {
			return &m.pipelines[i]
		}
	}
	return nil
}

// noBucket and noKey are the meta service's NOT_FOUND errors, with their
// reasons.
func noBucket(name string) error {
	return fmt.Errorf("%w %s", metaapi.ErrNoSuchBucket, name)
}

func noKey(bucket, key string) error {
	return fmt.Errorf("%w %s/%s", metaapi.ErrNoSuchKey, bucket, key)
}

// CreateBucket implements keyclient.Meta.
func (m *Meta) CreateBucket(_ context.Context, name string) (metaapi.Bucket, error) {
	if err := metaapi.ValidBucket(name); err != nil {
		return metaapi.Bucket{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.buckets[name]; ok {
		return metaapi.Bucket{}, fmt.Errorf("%w: bucket %s", metaapi.ErrExists, name)
	}
	b := &bucket{info: metaapi.Bucket{Name: name, Created: time.Now().UTC()}, keys: map[string]metaapi.KeyInfo{}}
	m.buckets[name] = b
	return b.info, nil
}

// ListBuckets implements keyclient.Meta.
func (m *Meta) ListBuckets(context.Context) (metaapi.BucketList, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out metaapi.BucketList
	for _, b := range m.buckets {
		out.Buckets = append(out.Buckets, m.bucketInfo(b))
	}
	sort.Slice(out.Buckets, func(i, j int) bool { return out.Buckets[i].Name < out.Buckets[j].Name })
	return out, nil
}

func (m *Meta) bucketInfo(b *bucket) metaapi.Bucket {
	info := b.info
	info.Keys = uint64(len(b.keys))
	for _, k := range b.keys {
		info.Bytes += k.Size
	}
	return info
}

// DeleteBucket implements keyclient.Meta.
func (m *Meta) DeleteBucket(_ context.Context, name string) error {
	if err := metaapi.ValidBucket(name); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.buckets[name]
	if !ok {
		return noBucket(name)
	}
	if len(b.keys) > 0 {
		return fmt.Errorf("%w: bucket %s has %d keys", metaapi.ErrNotEmpty, name, len(b.keys))
	}
	delete(m.buckets, name)
	return nil
}

// Allocate implements keyclient.Meta: round robin over the pipelines not
// excluded.
func (m *Meta) Allocate(_ context.Context, req metaapi.AllocateRequest) (metaapi.AllocateResponse, error) {
	if err := metaapi.ValidBucket(req.Bucket); err != nil {
		return metaapi.AllocateResponse{}, err
	}
	if err := metaapi.ValidKey(req.Key); err != nil {
		return metaapi.AllocateResponse{}, err
	}
	if h := m.AllocateHook; h != nil {
		if err := h(req); err != nil {
			return metaapi.AllocateResponse{}, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.buckets[req.Bucket]; !ok {
		return metaapi.AllocateResponse{}, noBucket(req.Bucket)
	}
	for range m.pipelines {
		p := m.pipelines[m.rr%len(m.pipelines)]
		m.rr++
		if slices.Contains(req.ExcludePipelines, p.ID) {
			continue
		}
		m.nextLocal[p.ID]++
		m.Allocations++
		p.Members = slices.Clone(p.Members)
		return metaapi.AllocateResponse{Block: metaapi.BlockRef{Container: p.ID, Local: m.nextLocal[p.ID]}, Pipeline: p}, nil
	}
	return metaapi.AllocateResponse{}, fmt.Errorf("%w: %d pipelines, %d excluded", metaapi.ErrNoPipeline, len(m.pipelines), len(req.ExcludePipelines))
}

// CommitKey implements keyclient.Meta.
func (m *Meta) CommitKey(_ context.Context, bucketName, key string, ck metaapi.CommitKey) (metaapi.KeyInfo, error) {
	if err := metaapi.ValidBucket(bucketName); err != nil {
		return metaapi.KeyInfo{}, err
	}
	if err := metaapi.ValidKey(key); err != nil {
		return metaapi.KeyInfo{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.buckets[bucketName]
	if !ok {
		return metaapi.KeyInfo{}, noBucket(bucketName)
	}
	var total uint64
	if len(ck.Inline) > 0 {
		if len(ck.Blocks) > 0 || len(ck.Inline) > metaapi.MaxInlineBytes || crc32c.Checksum(ck.Inline) != ck.CRC32C {
			return metaapi.KeyInfo{}, fmt.Errorf("%w: inline value of %d bytes with %d blocks or a wrong CRC32C", metaapi.ErrInvalid, len(ck.Inline), len(ck.Blocks))
		}
		total = uint64(len(ck.Inline))
		m.InlineCommits++
	}
	for i, kb := range ck.Blocks {
		if m.pipeline(kb.Pipeline) == nil {
			return metaapi.KeyInfo{}, fmt.Errorf("%w: block %d on unknown pipeline %d", metaapi.ErrInvalid, i, kb.Pipeline)
		}
		if kb.Length == 0 {
			return metaapi.KeyInfo{}, fmt.Errorf("%w: block %d is empty", metaapi.ErrInvalid, i)
		}
		total += kb.Length
	}
	if total != ck.Size {
		return metaapi.KeyInfo{}, fmt.Errorf("%w: blocks add up to %d bytes, size %d", metaapi.ErrInvalid, total, ck.Size)
	}
	ki := metaapi.KeyInfo{Bucket: bucketName, Key: key, Size: ck.Size, CRC32C: ck.CRC32C, Created: time.Now().UTC(), Blocks: slices.Clone(ck.Blocks), Inline: slices.Clone(ck.Inline)}
	for i := range ki.Blocks {
		ki.Blocks[i].Members = nil
	}
	b.keys[key] = ki
	m.Commits++
	return m.withMembers(ki), nil
}

func (m *Meta) withMembers(ki metaapi.KeyInfo) metaapi.KeyInfo {
	ki.Blocks = slices.Clone(ki.Blocks)
	for i := range ki.Blocks {
		if p := m.pipeline(ki.Blocks[i].Pipeline); p != nil {
			ki.Blocks[i].Members = slices.Clone(p.Members)
		}
	}
	return ki
}

// GetKey implements keyclient.Meta.
func (m *Meta) GetKey(_ context.Context, bucketName, key string) (metaapi.KeyInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.buckets[bucketName]
	if !ok {
		return metaapi.KeyInfo{}, noBucket(bucketName)
	}
	ki, ok := b.keys[key]
	if !ok {
		return metaapi.KeyInfo{}, noKey(bucketName, key)
	}
	return m.withMembers(ki), nil
}

// DeleteKey implements keyclient.Meta.
func (m *Meta) DeleteKey(_ context.Context, bucketName, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.buckets[bucketName]
	if !ok {
		return noBucket(bucketName)
	}
	if _, ok := b.keys[key]; !ok {
		return noKey(bucketName, key)
	}
	delete(b.keys, key)
	return nil
}

// ListKeys implements keyclient.Meta.
func (m *Meta) ListKeys(_ context.Context, bucketName, prefix, startAfter string, limit int) (metaapi.KeyList, error) {
	if limit <= 0 || limit > metaapi.MaxListLimit {
		return metaapi.KeyList{}, fmt.Errorf("%w: limit %d not in [1, %d]", metaapi.ErrInvalid, limit, metaapi.MaxListLimit)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.buckets[bucketName]
	if !ok {
		return metaapi.KeyList{}, noBucket(bucketName)
	}
	var names []string
	for k := range b.keys {
		if strings.HasPrefix(k, prefix) && k > startAfter {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	var out metaapi.KeyList
	for i, k := range names {
		if i == limit {
			out.Next = names[i-1]
			break
		}
		ki := b.keys[k]
		ki.Blocks = nil
		out.Keys = append(out.Keys, ki)
	}
	return out, nil
}
