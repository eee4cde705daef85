package keyclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spindle-store/spindle/internal/client"
	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/ecread"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/ecapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// Meta is what the key client needs of the meta service: the metaapi
// calls of buckets, block allocation and keys. metaapi.Client implements it;
// tests use an in-memory fake. Errors wrap the metaapi.Err* values.
type Meta interface {
	CreateBucket(ctx context.Context, name string) (metaapi.Bucket, error)
	ListBuckets(ctx context.Context) (metaapi.BucketList, error)
	DeleteBucket(ctx context.Context, name string) error
	Allocate(ctx context.Context, req metaapi.AllocateRequest) (metaapi.AllocateResponse, error)
	CommitKey(ctx context.Context, bucket, key string, ck metaapi.CommitKey) (metaapi.KeyInfo, error)
	GetKey(ctx context.Context, bucket, key string) (metaapi.KeyInfo, error)
	DeleteKey(ctx context.Context, bucket, key string) error
	ListKeys(ctx context.Context, bucket, prefix, startAfter string, limit int) (metaapi.KeyList, error)
}

// Defaults and limits of Options.
const (
	DefaultChunkSize   = 4 << 20
	DefaultBlockSize   = 256 << 20
	DefaultInFlight    = 8
	MaxInFlight        = 256
	DefaultCommitEvery = 16 << 20
	// MaxBlockSize bounds a block; so does MaxPutBlockHeader (a block's
	// chunk list and checksums must fit in one PutBlock frame header).
	MaxBlockSize        = 4 << 30
	MaxPutBlockHeader   = 512 << 10
	DefaultMaxFailovers = 4
	MaxMaxFailovers     = 64
	// MaxHoleRetries bounds the resends of one chunk that overtook its
	// predecessor (StatusHole); more means a bug, and fails the Put.
	MaxHoleRetries         = 16
	DefaultReadInFlight    = 8
	DefaultReadAttempts    = 2
	DefaultReadTimeout     = 10 * time.Second
	DefaultMaxPipelineClis = 64
	// ListPageSize is the page size List asks for.
	ListPageSize = metaapi.MaxListLimit
	// MaxListPages bounds the pages one List walks (MaxListPages ×
	// ListPageSize keys).
	MaxListPages = 1 << 20
	// DefaultInlineMaxBytes: a value of at most this many bytes is
	// stored inline, in its key's record in the meta service (one
	// CommitKey, no block), unless Options.InlineMaxBytes says otherwise.
	DefaultInlineMaxBytes = 64 << 10
	// DefaultNoPipelineWait: see Options.NoPipelineWait. The meta service
	// replaces a pipeline whose majority died once those datanodes are
	// STALE (5 s at its defaults) and hands out a new one about a second
	// later; a Put that meets the gap waits it out.
	DefaultNoPipelineWait = 8 * time.Second
	// noPipelineMin/MaxBackoff bound the pause between two allocations
	// that found no pipeline (jittered, internal/backoff).
	noPipelineMinBackoff = 50 * time.Millisecond
	noPipelineMaxBackoff = 500 * time.Millisecond
)

// Errors of the key client; test with errors.Is. Errors of the meta
// service wrap metaapi's (metaapi.ErrNotFound, metaapi.ErrNoPipeline, ...).
var (
	// ErrCorrupt marks data read back that does not match its checksums
	// or the value's CRC32C: the one corruption marker of the client
	// packages (it is client.ErrCorrupt).
	ErrCorrupt = client.ErrCorrupt
	// ErrPipelineFailed is a Put that gave up after MaxFailovers
	// pipelines failed under it.
	ErrPipelineFailed = errors.New("pipeline failed")
	// ErrClosed is any call on a Client after Close.
	ErrClosed = errors.New("keyclient: closed")
)

// Options configures a Client. Zero fields take the defaults above.
type Options struct {
	// ChunkSize is the size of one WriteChunk (default 4 MiB, at most
	// engine.MaxChunkSizeBytes).
	ChunkSize int
	// BlockSize is the size of a full block (default 256 MiB, at least
	// ChunkSize, at most MaxBlockSize).
	BlockSize int64
	// BytesPerChecksum is the checksum piece size (default 16 KiB).
	BytesPerChecksum uint32
	// InFlight is the number of chunks of one Put written at once
	// (default 8, at most MaxInFlight).
	InFlight int
	// CommitEvery is how many bytes of a block are acknowledged between
	// two checkpoint PutBlocks (default 16 MiB, rounded up to whole
	// chunks). It bounds what a pipeline failure makes the stream write
	// again.
	CommitEvery int64
	// PauseAtCheckpoints stops the writes of a block from the moment a
	// checkpoint PutBlock of it is due until the PutBlock is answered.
	// Off by default (a checkpoint overlaps the block's later writes);
	// for datanodes whose engine refuses a chunk whose block was
	// committed by a PutBlock during its pwrite (NOT_OPEN, fixed in the
	// engine since), which costs a Put a new block each time.
	PauseAtCheckpoints bool
	// MaxFailovers bounds the pipelines that may fail under one Put
	// (default 4).
	MaxFailovers int
	// ReadSize is the most bytes of one ReadChunk (default ChunkSize);
	// ReadInFlight the ranges of one Get read at once (default 8).
	ReadSize     int
	ReadInFlight int
	// ReadAttempts and ReadTimeout bound the attempts of one read on one
	// replica before the next replica is tried (defaults 2, 10 s).
	ReadAttempts int
	ReadTimeout  time.Duration
	// Pipeline configures the pipeline clients of writes (retries,
	// timeouts, connections); its BytesPerChecksum is ignored. Its
	// Conn.TLS, when nil, is the meta client's (metaapi.Client.TLS).
	Pipeline client.Options
	// MaxPipelineClients bounds the idle pipeline clients kept (default 64).
	MaxPipelineClients int
	// InlineMaxBytes: a Put whose whole value is at most this long
	// stores it inline, in the key's record (CommitKey.Inline): one
	// request to the meta service instead of an allocation, a chunk
	// write, a PutBlock and a commit. 0: DefaultInlineMaxBytes; negative:
	// never; at most metaapi.MaxInlineBytes.
	InlineMaxBytes int
	// NoPipelineWait bounds how long a block's allocation is retried
	// while the meta service has no pipeline to hand out
	// (metaapi.ErrNoPipeline): the seconds between datanodes' deaths and
	// their pipelines' replacement. 0: DefaultNoPipelineWait; negative:
	// no retry (the error at once).
	NoPipelineWait time.Duration
	// Logger receives failovers and resends (nil: slog.Default()).
	Logger *slog.Logger
}

func (o Options) withDefaults() (Options, error) {
	if o.ChunkSize <= 0 {
		o.ChunkSize = DefaultChunkSize
	}
	if o.ChunkSize > engine.MaxChunkSizeBytes {
		return o, fmt.Errorf("keyclient: chunk size %d exceeds %d", o.ChunkSize, engine.MaxChunkSizeBytes)
	}
	if o.BlockSize <= 0 {
		o.BlockSize = DefaultBlockSize
	}
	if o.BlockSize < int64(o.ChunkSize) || o.BlockSize > MaxBlockSize {
		return o, fmt.Errorf("keyclient: block size %d not in [chunk size %d, %d]", o.BlockSize, o.ChunkSize, int64(MaxBlockSize))
	}
	if o.BytesPerChecksum == 0 {
		o.BytesPerChecksum = engine.DefaultBytesPerChecksum
	}
	if o.BytesPerChecksum < engine.MinBytesPerChecksum || o.BytesPerChecksum > engine.MaxBytesPerChecksum {
		return o, fmt.Errorf("keyclient: bytes per checksum %d not in [%d, %d]", o.BytesPerChecksum, engine.MinBytesPerChecksum, engine.MaxBytesPerChecksum)
	}
	// A full block's PutBlock: 4 bytes per checksum piece plus about 24
	// per chunk (offset, length, framing).
	chunks := (o.BlockSize + int64(o.ChunkSize) - 1) / int64(o.ChunkSize)
	pieces := (o.BlockSize+int64(o.BytesPerChecksum)-1)/int64(o.BytesPerChecksum) + chunks
	if hdr := 4*pieces + 24*chunks; hdr > MaxPutBlockHeader {
		return o, fmt.Errorf("keyclient: a block of %d bytes in chunks of %d at %d bytes per checksum needs a PutBlock of ~%d bytes, more than %d: use bigger chunks or pieces, or smaller blocks",
			o.BlockSize, o.ChunkSize, o.BytesPerChecksum, hdr, MaxPutBlockHeader)
	}
	if o.InFlight <= 0 {
		o.InFlight = DefaultInFlight
	}
	o.InFlight = min(o.InFlight, MaxInFlight)
	if o.CommitEvery <= 0 {
		o.CommitEvery = DefaultCommitEvery
	}
	if o.MaxFailovers <= 0 {
		o.MaxFailovers = DefaultMaxFailovers
	}
	o.MaxFailovers = min(o.MaxFailovers, MaxMaxFailovers)
	if o.ReadSize <= 0 {
		o.ReadSize = o.ChunkSize
	}
	o.ReadSize = min(o.ReadSize, engine.MaxChunkSizeBytes)
	if o.ReadInFlight <= 0 {
		o.ReadInFlight = DefaultReadInFlight
	}
	o.ReadInFlight = min(o.ReadInFlight, MaxInFlight)
	if o.ReadAttempts <= 0 {
		o.ReadAttempts = DefaultReadAttempts
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = DefaultReadTimeout
	}
	if o.MaxPipelineClients <= 0 {
		o.MaxPipelineClients = DefaultMaxPipelineClis
	}
	switch {
	case o.NoPipelineWait == 0:
		o.NoPipelineWait = DefaultNoPipelineWait
	case o.NoPipelineWait < 0:
		o.NoPipelineWait = 0
	}
	switch {
	case o.InlineMaxBytes == 0:
		o.InlineMaxBytes = DefaultInlineMaxBytes
	case o.InlineMaxBytes < 0:
		o.InlineMaxBytes = -1
	case o.InlineMaxBytes > metaapi.MaxInlineBytes:
		return o, fmt.Errorf("keyclient: inline max %d bytes exceeds the meta service's %d", o.InlineMaxBytes, metaapi.MaxInlineBytes)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Pipeline.BytesPerChecksum = o.BytesPerChecksum
	if o.Pipeline.Logger == nil {
		o.Pipeline.Logger = o.Logger
	}
	return o, nil
}

// chunksPerCommit is CommitEvery in whole chunks (at least 1).
func (o *Options) chunksPerCommit() int {
	n := int((o.CommitEvery + int64(o.ChunkSize) - 1) / int64(o.ChunkSize))
	return max(n, 1)
}

// MaxBufferedChunks is the most chunks one Put holds in memory: the ones in
// flight plus those acknowledged but not yet covered by a PutBlock, never
// more than a block's worth.
func (o *Options) MaxBufferedChunks() int {
	perBlock := int((o.BlockSize + int64(o.ChunkSize) - 1) / int64(o.ChunkSize))
	return max(1, min(o.InFlight+2*o.chunksPerCommit(), perBlock))
}

// Client is a key store client. See the package comment.
type Client struct {
	meta   Meta
	opts   Options
	log    *slog.Logger
	writes *pool // pipeline clients of writes (retrying on the leader)
	reads  *pool // pipeline clients of reads (few attempts per replica)
	// pieceShift appends a piece of BytesPerChecksum bytes to a CRC32C: a
	// put makes the value's CRC32C from its pieces' (crc32c.Shift).
	pieceShift *crc32c.Shift
	// ec reads the blocks of erasure-coded containers (nil: a meta
	// service without Do, a test's fake).
	ec *ecread.Reader
}

// New returns a Client of the key store whose namespace is meta.
func New(meta Meta, opts Options) (*Client, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if meta == nil {
		return nil, errors.New("keyclient: no meta service")
	}
	// One identity per client: the datanodes are dialled with the meta
	// client's TLS settings unless the options bring their own.
	if mt, ok := meta.(interface{ TLS() *tlsconf.Settings }); ok && o.Pipeline.Conn.TLS == nil {
		o.Pipeline.Conn.TLS = mt.TLS()
	}
	ro := o.Pipeline
	ro.MaxAttempts = o.ReadAttempts
	ro.RetryTimeout = o.ReadTimeout
	ro.AttemptTimeout = min(o.ReadTimeout, max(ro.AttemptTimeout, client.DefaultAttemptTimeout))
	c := &Client{
		meta: meta, opts: o, log: o.Logger,
		writes:     newPool(o.Pipeline, o.MaxPipelineClients),
		reads:      newPool(ro, o.MaxPipelineClients),
		pieceShift: crc32c.NewShift(uint64(o.BytesPerChecksum)),
	}
	if d, ok := meta.(ecapi.Doer); ok {
		c.ec = ecread.New(d, o.Pipeline.Conn.TLS)
	}
	return c, nil
}

// Options returns the Client's options, defaults filled in.
func (c *Client) Options() Options { return c.opts }

// Meta returns the meta service the Client uses.
func (c *Client) Meta() Meta { return c.meta }

// Close closes every pipeline connection. Calls in flight fail.
func (c *Client) Close() error {
	c.writes.close()
	c.reads.close()
	if c.ec != nil {
		c.ec.Close()
	}
	return nil
}

// Stat returns a key's metadata.
func (c *Client) Stat(ctx context.Context, bucket, key string) (metaapi.KeyInfo, error) {
	if err := validName(bucket, key); err != nil {
		return metaapi.KeyInfo{}, err
	}
	ki, err := c.meta.GetKey(ctx, bucket, key)
	if err != nil {
		return metaapi.KeyInfo{}, fmt.Errorf("stat %s/%s: %w", bucket, key, err)
	}
	return ki, nil
}

// Delete deletes a key (its blocks are deleted on the datanodes later).
func (c *Client) Delete(ctx context.Context, bucket, key string) error {
	if err := validName(bucket, key); err != nil {
		return err
	}
	if err := c.meta.DeleteKey(ctx, bucket, key); err != nil {
		return fmt.Errorf("delete %s/%s: %w", bucket, key, err)
	}
	return nil
}

// ListPage returns one page of the keys of bucket that start with prefix,
// after startAfter (limit ≤ 0: ListPageSize).
func (c *Client) ListPage(ctx context.Context, bucket, prefix, startAfter string, limit int) (metaapi.KeyList, error) {
	if err := metaapi.ValidBucket(bucket); err != nil {
		return metaapi.KeyList{}, err
	}
	if limit <= 0 || limit > metaapi.MaxListLimit {
		limit = ListPageSize
	}
	kl, err := c.meta.ListKeys(ctx, bucket, prefix, startAfter, limit)
	if err != nil {
		return metaapi.KeyList{}, fmt.Errorf("list %s/%s: %w", bucket, prefix, err)
	}
	return kl, nil
}

// List calls fn for every key of bucket that starts with prefix, in key
// order, page after page; fn's error stops it and is returned.
func (c *Client) List(ctx context.Context, bucket, prefix string, fn func(metaapi.KeyInfo) error) error {
	after := ""
	for range MaxListPages {
		kl, err := c.ListPage(ctx, bucket, prefix, after, ListPageSize)
		if err != nil {
			return err
		}
		for _, k := range kl.Keys {
			if err := fn(k); err != nil {
				return err
			}
		}
		if kl.Next == "" {
			return nil
		}
		if kl.Next <= after {
			return fmt.Errorf("list %s/%s: meta service returned page cursor %q after %q: not advancing", bucket, prefix, kl.Next, after)
		}
		after = kl.Next
	}
	return fmt.Errorf("list %s/%s: more than %d pages", bucket, prefix, MaxListPages)
}

// CreateBucket creates a bucket.
func (c *Client) CreateBucket(ctx context.Context, name string) (metaapi.Bucket, error) {
	if err := metaapi.ValidBucket(name); err != nil {
		return metaapi.Bucket{}, err
	}
	b, err := c.meta.CreateBucket(ctx, name)
	if err != nil {
		return metaapi.Bucket{}, fmt.Errorf("create bucket %s: %w", name, err)
	}
	return b, nil
}

// ListBuckets lists the buckets.
func (c *Client) ListBuckets(ctx context.Context) ([]metaapi.Bucket, error) {
	bl, err := c.meta.ListBuckets(ctx)
	if err != nil {
		return nil, fmt.Errorf("list buckets: %w", err)
	}
	return bl.Buckets, nil
}

// DeleteBucket deletes an empty bucket.
func (c *Client) DeleteBucket(ctx context.Context, name string) error {
	if err := metaapi.ValidBucket(name); err != nil {
		return err
	}
	if err := c.meta.DeleteBucket(ctx, name); err != nil {
		return fmt.Errorf("delete bucket %s: %w", name, err)
	}
	return nil
}

func validName(bucket, key string) error {
	if err := metaapi.ValidBucket(bucket); err != nil {
		return err
	}
	return metaapi.ValidKey(key)
}

// pool shares pipeline clients among streams, keyed by pipeline ID and
// member addresses (in order): the containers of one pipeline may have
// different replicas once some were re-replicated (reads list a CLOSED
// container's replicas, not the pipeline's members), and each replica set
// keeps its own client rather than replacing the others' at every switch.
// A client no stream uses stays idle; beyond max idle ones the least
// recently released is closed, so a pipeline's old member list ages out.
type pool struct {
	opts client.Options
	max  int

	mu     sync.Mutex
	m      map[poolKey]*pooled
	idle   []*pooled // unreferenced clients still in m, least recently released first
	closed bool
}

type poolKey struct {
	id      uint64
	members string // the addresses joined by NUL
}

type pooled struct {
	key   poolKey
	c     *client.Client
	refs  int
	stale bool // evicted or pool closed: closed when refs reach 0
}

func newPool(opts client.Options, max int) *pool {
	return &pool{opts: opts, max: max, m: make(map[poolKey]*pooled)}
}

// get returns a referenced client of pipeline id with those members.
func (p *pool) get(id uint64, members []string) (*pooled, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	k := poolKey{id: id, members: strings.Join(members, "\x00")}
	if pc := p.m[k]; pc != nil {
		pc.refs++
		p.idle = slices.DeleteFunc(p.idle, func(x *pooled) bool { return x == pc })
		return pc, nil
	}
	c, err := client.New(members, id, p.opts)
	if err != nil {
		return nil, fmt.Errorf("pipeline %d: %w", id, err)
	}
	pc := &pooled{key: k, c: c, refs: 1}
	p.m[k] = pc
	return pc, nil
}

// put releases a reference.
func (p *pool) put(pc *pooled) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pc.refs--
	if pc.refs < 0 {
		panic("keyclient: pipeline client released twice")
	}
	if pc.refs > 0 {
		return
	}
	if pc.stale || p.closed {
		_ = pc.c.Close() // always nil (client.Client.Close)
		return
	}
	p.idle = append(p.idle, pc)
	for len(p.idle) > p.max {
		p.evictLocked(p.idle[0])
	}
}

// evictLocked closes an idle client (no stream holds it) and forgets it.
// Keys are never replaced, so an idle client is always the one in p.m.
func (p *pool) evictLocked(pc *pooled) {
	delete(p.m, pc.key)
	p.idle = slices.DeleteFunc(p.idle, func(x *pooled) bool { return x == pc })
	pc.stale = true
	_ = pc.c.Close() // always nil (client.Client.Close)
}

func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, pc := range p.m {
		pc.stale = true
		_ = pc.c.Close() // always nil; calls in flight fail; idempotent for the last put
	}
	p.m = map[poolKey]*pooled{}
	p.idle = nil
}

// memberAddrs returns the addresses of ms.
func memberAddrs(ms []metaapi.Member) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Addr)
	}
	return out
}
