package keyclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spindle-store/spindle/internal/backoff"
	"github.com/spindle-store/spindle/internal/client"
	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/transport"
)

// PutOptions are the settings of one Put.
type PutOptions struct {
	// Progress, when set, is called with the bytes of the value the
	// datanodes acknowledged so far (non-decreasing), from the Put's
	// goroutine, after each acknowledgement.
	Progress func(done int64)
	// Commit, when set, replaces the CommitKey that ends the Put: it is
	// called once every block is complete and the source was read to its
	// end, with the value's size, blocks and CRC32C (or, for a value
	// stored inline, the value itself in ck.Inline and no blocks), and
	// makes them visible (the S3 gateway commits a key with its object
	// metadata, or a part of a multipart upload). Its error fails the
	// Put; the blocks are then unreferenced and the meta service deletes
	// them.
	Commit func(ctx context.Context, ck metaapi.CommitKey) (metaapi.KeyInfo, error)
	// NoInline writes the value to blocks whatever its size (a Commit
	// that cannot store a value inline: a multipart upload's part).
	NoInline bool
	// SizeHintBytes, when more than 0, is the value's expected size (an
	// HTTP Content-Length, a file's size): chunk buffers are sized to what
	// is left of it (plus one byte, to see the end in the same read)
	// rather than ChunkSize, so a 1 MiB value does not allocate and zero a
	// 4 MiB buffer. Only buffers: a value of another size is written all
	// the same.
	SizeHintBytes int64
}

// PutResult is what a Put did.
type PutResult struct {
	Key metaapi.KeyInfo
	// Chunks written (acknowledged) and PutBlocks acknowledged, resends
	// included.
	Chunks, PutBlocks int
	// Holes counts chunks sent again because they overtook their
	// predecessor on the way to the leader: 0 unless a write of the block
	// was retried (see the package comment).
	Holes int
	// Failovers counts blocks ended early because their pipeline failed.
	Failovers int
	// Excluded lists the pipelines that failed under this Put.
	Excluded []uint64
	// Inline: the value was stored in its key's record (no block).
	Inline bool
}

// Put writes the value read from r (to its end) as bucket/key, replacing
// an older version once committed. See the package comment for how it is
// written and what a pipeline failure does. An error means no key was
// committed by this Put, unless it is a CommitKey error that leaves the
// outcome unknown (the meta service's answer was lost).
//
// r reads straight into the Put's chunk buffers, which the Put changes
// only by reading r into them again and drops (never reuses elsewhere)
// when it returns: a reader may go on reading the bytes a Read returned
// after it returned, until its next Read into the same bytes or the Put's
// return (the S3 gateway hashes them asynchronously so). Keep it so if
// buffers are ever pooled across Puts.
func (c *Client) Put(ctx context.Context, bucket, key string, r io.Reader, opts PutOptions) (PutResult, error) {
	if err := validName(bucket, key); err != nil {
		return PutResult{}, err
	}
	if lim := c.opts.InlineMaxBytes; lim > 0 && !opts.NoInline {
		head, whole, err := readHead(r, lim)
		if err != nil {
			return PutResult{}, fmt.Errorf("put %s/%s: read: %w", bucket, key, err)
		}
		if whole {
			return c.putInline(ctx, bucket, key, head, opts)
		}
		r = io.MultiReader(bytes.NewReader(head), r)
	}
	s := &putStream{
		c: c, o: &c.opts, ctx: ctx, bucket: bucket, key: key, r: r, progress: opts.Progress, commitFn: opts.Commit,
		sizeHint:    opts.SizeHintBytes,
		events:      make(chan putEvent, c.opts.InFlight+1),
		maxBuffered: c.opts.MaxBufferedChunks(),
		perCommit:   c.opts.chunksPerCommit(),
	}
	err := s.run()
	s.cleanup()
	if err != nil {
		return s.res, fmt.Errorf("put %s/%s: %w", bucket, key, err)
	}
	return s.res, nil
}

// readHead reads r up to lim+1 bytes: whole reports that r ended within
// lim bytes (head is then the whole value). The buffer starts at
// readHeadStartBytes and doubles, so that a small value costs a small one.
func readHead(r io.Reader, lim int) (head []byte, whole bool, err error) {
	head = make([]byte, 0, min(lim+1, readHeadStartBytes))
	for {
		if len(head) > lim {
			return head, false, nil
		}
		if len(head) == cap(head) {
			head = slices.Grow(head, min(cap(head), lim+1-len(head)))
		}
		n, err := r.Read(head[len(head):min(cap(head), lim+1)])
		head = head[:len(head)+n]
		if errors.Is(err, io.EOF) {
			return head, len(head) <= lim, nil
		}
		if err != nil {
			return nil, false, err
		}
	}
}

// readHeadStartBytes is readHead's first buffer.
const readHeadStartBytes = 8 << 10

// putInline commits value, whole, inline in its key's record: one
// request to the meta service, durable as the record is.
func (c *Client) putInline(ctx context.Context, bucket, key string, value []byte, opts PutOptions) (PutResult, error) {
	ck := metaapi.CommitKey{Size: uint64(len(value)), CRC32C: crc32c.Checksum(value), Inline: value}
	if len(value) == 0 {
		ck.Inline = nil // an empty value: no blocks, nothing inline
	}
	var ki metaapi.KeyInfo
	var err error
	if opts.Commit != nil {
		ki, err = opts.Commit(ctx, ck)
	} else {
		ki, err = c.meta.CommitKey(ctx, bucket, key, ck)
	}
	if err != nil {
		return PutResult{}, fmt.Errorf("put %s/%s: commit inline (%d bytes): %w", bucket, key, len(value), err)
	}
	if opts.Progress != nil && len(value) > 0 {
		opts.Progress(int64(len(value)))
	}
	return PutResult{Key: ki, Inline: true}, nil
}

// putStream is the state of one Put, owned by its goroutine.
type putStream struct {
	c           *Client
	o           *Options
	ctx         context.Context
	bucket, key string
	r           io.Reader
	progress    func(int64)
	commitFn    func(context.Context, metaapi.CommitKey) (metaapi.KeyInfo, error)
	maxBuffered int
	perCommit   int
	sizeHint    int64 // PutOptions.SizeHintBytes

	events      chan putEvent
	outstanding int // goroutines started that have not reported yet

	crc      uint32
	size     uint64 // bytes read from r
	eof      bool
	reported int64 // last progress reported

	blocks []metaapi.KeyBlock // the key's finished blocks
	blk    *blockState        // the block being written; nil: none open
	gen    int                // generation of the last block opened
	free   [][]byte           // chunk buffers to reuse
	res    PutResult
}

// blockState is the block being written.
type blockState struct {
	gen      int
	ref      metaapi.BlockRef
	pipeline uint64
	pc       *pooled
	ctx      context.Context
	cancel   context.CancelFunc
	base     uint64 // the block's offset in the value
	fill     uint64 // bytes of the block assigned to chunks
	// committed are the chunks the last acknowledged PutBlock listed;
	// committedLen their length.
	committed    []transport.ChunkInfo
	committedLen uint64
	// buf holds the chunks after the committed ones, in order, with
	// their bytes.
	buf      []*pchunk
	inflight int  // chunk writes of this block in flight
	putting  bool // a PutBlock of this block is in flight
	// gate is closed once the last chunk write started has queued its
	// request on its connection (or given up before that): the next one
	// waits for it, so that the block's writes reach the leader in order.
	gate chan struct{}
}

// pchunk is one chunk held by the stream.
type pchunk struct {
	data    []byte
	sums    []uint32
	off     uint64 // offset in the current block
	acked   bool
	sending bool // a write of it to the current block is in flight
	holes   int
	users   int  // goroutines (of any block) using data
	done    bool // committed: data returns to the free list when users is 0
}

type eventKind int

const (
	evChunk eventKind = iota + 1
	evPutBlock
)

type putEvent struct {
	kind   eventKind
	gen    int
	ch     *pchunk // evChunk
	n      int     // evPutBlock: chunks of buf covered
	length uint64  // evPutBlock: block length
	err    error
}

// sealed reports whether no more chunks go to b.
func (s *putStream) sealed(b *blockState) bool {
	return s.eof || b.fill >= uint64(s.o.BlockSize)
}

func (s *putStream) run() error {
	for {
		if err := s.ctx.Err(); err != nil {
			return err
		}
		progressed, err := s.step()
		if err != nil {
			return err
		}
		if s.eof && s.blk == nil {
			return s.commit()
		}
		if progressed {
			continue
		}
		if s.outstanding == 0 {
			panic(fmt.Sprintf("keyclient: put stream stuck: %s", s.describe()))
		}
		select {
		case ev := <-s.events:
			if err := s.handle(ev); err != nil {
				return err
			}
		case <-s.ctx.Done():
			return s.ctx.Err()
		}
	}
}

// step does the next thing that needs no waiting: finish a complete block,
// start a PutBlock, send chunks, read a chunk. It reports whether it did
// anything.
func (s *putStream) step() (bool, error) {
	// Take every event already there first: acknowledgements free room.
	for {
		select {
		case ev := <-s.events:
			if err := s.handle(ev); err != nil {
				return false, err
			}
			continue
		default:
		}
		break
	}
	if b := s.blk; b != nil {
		if s.sealed(b) && len(b.buf) == 0 && !b.putting {
			s.finishBlock()
			return true, nil
		}
		started, due := false, false
		if !b.putting {
			n := s.ackedPrefix(b)
			due = n > 0 && (n >= s.perCommit || n == len(b.buf) && (s.sealed(b) || len(b.buf) >= s.maxBuffered))
			if due && (!s.o.PauseAtCheckpoints || b.inflight == 0) {
				s.startPutBlock(b, n)
				started = true
			}
		}
		// With PauseAtCheckpoints, no chunk of the block is written from
		// the moment its checkpoint is due until the PutBlock is answered.
		quiet := s.o.PauseAtCheckpoints && (due || b.putting)
		if !quiet && s.sendReady(b) || started {
			return true, nil
		}
	}
	return s.readChunk()
}

// ackedPrefix is the number of leading acknowledged chunks of b.buf.
func (s *putStream) ackedPrefix(b *blockState) int {
	n := 0
	for n < len(b.buf) && b.buf[n].acked {
		n++
	}
	return n
}

// sendReady starts the writes of b's chunks that may go now, in order: a
// chunk goes once every earlier one is acknowledged or on its way. A chunk
// refused for a hole (possible only after a retried write: see the package
// comment) more than once goes only once every earlier one is acknowledged
// (then it cannot be refused again: progress is certain).
func (s *putStream) sendReady(b *blockState) bool {
	started := false
	allAcked := true
	for _, ch := range b.buf {
		if ch.acked {
			continue
		}
		if ch.sending {
			allAcked = false
			continue
		}
		if b.inflight >= s.window(b) || ch.holes > 1 && !allAcked {
			break
		}
		s.sendChunk(b, ch)
		started = true
		allAcked = false
	}
	return started
}

// window is the most chunk writes b may have in flight: InFlight, or 1
// while the pipeline client knows no leader (at the start, and after the
// leader failed): writes sent at once to a member that is not the leader
// would reach the leader in redirect order, most of them refused as holes.
func (s *putStream) window(b *blockState) int {
	if b.pc.c.Leader() == "" {
		return 1
	}
	return s.o.InFlight
}

// readChunk reads the next chunk from the source when there is room for
// it, opening a block for it when none is open.
func (s *putStream) readChunk() (bool, error) {
	if s.eof {
		return false, nil
	}
	b := s.blk
	if b != nil && (s.sealed(b) || b.inflight >= s.window(b) || len(b.buf) >= s.maxBuffered) {
		return false, nil
	}
	n := uint64(s.o.ChunkSize)
	if b != nil {
		n = min(n, uint64(s.o.BlockSize)-b.fill)
	}
	if hint := uint64(s.sizeHint); s.sizeHint > 0 && hint >= s.size {
		n = min(n, hint-s.size+1) // +1: the end is seen in this read
	}
	var data []byte
	if k := len(s.free); k > 0 && uint64(cap(s.free[k-1])) >= n {
		data, s.free = s.free[k-1][:n], s.free[:k-1]
	} else if s.sizeHint > 0 {
		data = transport.NewPayload(int(n)) // recycled: no page faults, zeroing or GC of a fresh chunk per put
	} else {
		data = transport.NewPayload(int(s.o.ChunkSize))[:n]
	}
	got, err := io.ReadFull(s.r, data)
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		s.eof = true
	case err != nil:
		return false, fmt.Errorf("reading the value after %d bytes: %w", s.size+uint64(got), err)
	}
	if got == 0 {
		s.free = append(s.free, data)
		return true, nil
	}
	data = data[:got]
	sums := engine.ComputeChecksums(nil, data, s.o.BytesPerChecksum)
	s.crc = appendPieceCRCs(s.crc, s.c.pieceShift, int(s.o.BytesPerChecksum), sums, len(data))
	s.size += uint64(got)
	if b == nil {
		if b, err = s.openBlock(s.size - uint64(got)); err != nil {
			return false, err
		}
	}
	ch := &pchunk{data: data, sums: sums, off: b.fill}
	b.fill += uint64(got)
	b.buf = append(b.buf, ch)
	return true, nil
}

// appendPieceCRCs is the CRC32C of a value so far (crc) followed by n
// bytes whose pieces of bpc bytes (the last one perhaps fewer) have the
// CRC32Cs sums: combined (shift appends a piece of bpc bytes), not
// computed again over the bytes.
func appendPieceCRCs(crc uint32, shift *crc32c.Shift, bpc int, sums []uint32, n int) uint32 {
	for i, sum := range sums {
		if k := min(bpc, n-i*bpc); k == bpc {
			crc = shift.Apply(crc) ^ sum
		} else {
			crc = crc32c.Combine(crc, sum, uint64(k))
		}
	}
	return crc
}

// allocate asks the meta service for a block on a pipeline not excluded,
// again while it has none (ErrNoPipeline), for up to
// Options.NoPipelineWait with a jittered backoff. It returns the
// pipelines the answer had to avoid. Asked again, it excludes none: a
// pipeline this Put excluded failed on a timeout or a leader election as
// often as for good, and the meta service offers open pipelines only. On a
// three-datanode cluster under load both open pipelines went leaderless
// for 10 s, the Put excluded both and failed for want of a third (teragen);
// one that fails again counts against MaxFailovers.
func (s *putStream) allocate() (metaapi.AllocateResponse, []uint64, error) {
	start, delay := time.Now(), noPipelineMinBackoff
	exclude := slices.Clone(s.res.Excluded)
	for {
		ar, err := s.c.meta.Allocate(s.ctx, metaapi.AllocateRequest{Bucket: s.bucket, Key: s.key, ExcludePipelines: exclude})
		left := s.o.NoPipelineWait - time.Since(start)
		if !errors.Is(err, metaapi.ErrNoPipeline) || left <= 0 {
			return ar, exclude, err
		}
		exclude = nil
		if !backoff.Sleep(s.ctx, min(backoff.Jitter(delay), left)) {
			return ar, exclude, fmt.Errorf("%w (waiting %v for a pipeline after: %w)", s.ctx.Err(), time.Since(start).Round(time.Millisecond), err)
		}
		delay = min(2*delay, noPipelineMaxBackoff)
	}
}

// openBlock allocates a block at offset base of the value, on a pipeline
// not excluded.
func (s *putStream) openBlock(base uint64) (*blockState, error) {
	if len(s.blocks) >= metaapi.MaxBlocksPerKey {
		return nil, fmt.Errorf("value needs more than %d blocks (block size %d)", metaapi.MaxBlocksPerKey, s.o.BlockSize)
	}
	ar, excluded, err := s.allocate()
	if err != nil {
		return nil, fmt.Errorf("allocate a block at offset %d: %w", base, err)
	}
	if len(ar.Pipeline.Members) == 0 {
		return nil, fmt.Errorf("allocate a block at offset %d: pipeline %d has no members", base, ar.Pipeline.ID)
	}
	if slices.Contains(excluded, ar.Pipeline.ID) {
		return nil, fmt.Errorf("allocate a block at offset %d: meta service returned pipeline %d, which was excluded", base, ar.Pipeline.ID)
	}
	pc, err := s.c.writes.get(ar.Pipeline.ID, memberAddrs(ar.Pipeline.Members))
	if err != nil {
		return nil, err
	}
	s.gen++
	gate := make(chan struct{})
	close(gate)
	ctx, cancel := context.WithCancel(s.ctx)
	s.blk = &blockState{gen: s.gen, ref: ar.Block, pipeline: ar.Pipeline.ID, pc: pc, ctx: ctx, cancel: cancel, base: base, gate: gate}
	return s.blk, nil
}

// sendChunk starts the write of ch to b.
func (s *putStream) sendChunk(b *blockState, ch *pchunk) {
	prev, mine := b.gate, make(chan struct{})
	b.gate = mine
	ch.sending = true
	ch.users++
	b.inflight++
	s.outstanding++
	ctx, cl, gen := b.ctx, b.pc.c, b.gen
	id := client.BlockID{Container: b.ref.Container, Local: b.ref.Local, Token: b.ref.Token}
	data, sums, off, bpc := ch.data, ch.sums, ch.off, s.o.BytesPerChecksum
	go func() {
		select {
		case <-prev:
		case <-ctx.Done():
		}
		// mine is closed once this write's request is queued on the
		// connection, not before: started one after the other, two
		// writes could otherwise swap on their way to the connection.
		err := cl.WriteChunkQueued(ctx, id, off, data, bpc, sums, func() { close(mine) })
		s.events <- putEvent{kind: evChunk, gen: gen, ch: ch, err: err}
	}()
}

// startPutBlock commits b's committed chunks and the first n of buf.
func (s *putStream) startPutBlock(b *blockState, n int) {
	chunks := slices.Clone(b.committed)
	length := b.committedLen
	for _, ch := range b.buf[:n] {
		chunks = append(chunks, transport.ChunkInfo{Offset: ch.off, Length: uint64(len(ch.data)), Checksums: ch.sums})
		length += uint64(len(ch.data))
	}
	bd := transport.BlockData{ContainerID: b.ref.Container, LocalID: b.ref.Local, Length: length, BytesPerChecksum: s.o.BytesPerChecksum, Chunks: chunks}
	b.putting = true
	s.outstanding++
	ctx, cl, gen, token := b.ctx, b.pc.c, b.gen, b.ref.Token
	go func() {
		err := cl.PutBlock(ctx, bd, token)
		s.events <- putEvent{kind: evPutBlock, gen: gen, n: n, length: length, err: err}
	}()
}

// handle applies one event.
func (s *putStream) handle(ev putEvent) error {
	s.outstanding--
	if ev.kind == evChunk {
		ev.ch.users--
		s.recycle(ev.ch)
	}
	b := s.blk
	if b == nil || ev.gen != b.gen {
		return nil // of a block given up
	}
	if ev.err != nil {
		if err := s.ctx.Err(); err != nil {
			return err // the Put was cancelled: not a pipeline's failure
		}
	}
	switch ev.kind {
	case evChunk:
		b.inflight--
		ev.ch.sending = false
		if ev.err == nil {
			ev.ch.acked = true
			s.res.Chunks++
			s.report(b)
			return nil
		}
		switch classify(ev.err) {
		case failHole:
			ev.ch.holes++
			s.res.Holes++
			if ev.ch.holes > MaxHoleRetries {
				return fmt.Errorf("chunk at offset %d of block %d/%d refused %d times for a hole: %w", ev.ch.off, b.ref.Container, b.ref.Local, ev.ch.holes, ev.err)
			}
			return nil
		case failBlock:
			return s.failover(ev.err, false)
		case failPipeline:
			return s.failover(ev.err, true)
		default:
			return fmt.Errorf("write chunk at offset %d of block %d/%d on pipeline %d: %w", ev.ch.off, b.ref.Container, b.ref.Local, b.pipeline, ev.err)
		}
	case evPutBlock:
		b.putting = false
		if ev.err == nil {
			for _, ch := range b.buf[:ev.n] {
				b.committed = append(b.committed, transport.ChunkInfo{Offset: ch.off, Length: uint64(len(ch.data)), Checksums: ch.sums})
				ch.done = true
				s.recycle(ch)
			}
			b.buf = slices.Delete(b.buf, 0, ev.n)
			b.committedLen = ev.length
			s.res.PutBlocks++
			return nil
		}
		switch classify(ev.err) {
		case failBlock:
			return s.failover(ev.err, false)
		case failPipeline:
			return s.failover(ev.err, true)
		default:
			return fmt.Errorf("put block %d/%d (%d bytes) on pipeline %d: %w", b.ref.Container, b.ref.Local, ev.length, b.pipeline, ev.err)
		}
	}
	panic(fmt.Sprintf("keyclient: unknown put event %d", ev.kind))
}

// recycle returns a committed chunk's buffer once no goroutine uses it.
func (s *putStream) recycle(ch *pchunk) {
	if ch.done && ch.users == 0 && ch.data != nil {
		if len(s.free) < s.maxBuffered {
			s.free = append(s.free, ch.data[:0])
		}
		ch.data = nil
	}
}

// report calls the progress callback with the bytes acknowledged.
func (s *putStream) report(b *blockState) {
	if s.progress == nil {
		return
	}
	done := b.base + b.committedLen
	for _, ch := range b.buf {
		if !ch.acked {
			break
		}
		done += uint64(len(ch.data))
	}
	if int64(done) > s.reported {
		s.reported = int64(done)
		s.progress(s.reported)
	}
}

// finishBlock ends the current block, complete: it becomes the key's next
// block.
func (s *putStream) finishBlock() {
	b := s.blk
	s.blocks = append(s.blocks, metaapi.KeyBlock{BlockRef: metaapi.BlockRef{Container: b.ref.Container, Local: b.ref.Local}, Pipeline: b.pipeline, Length: b.committedLen})
	s.closeBlock()
}

// closeBlock forgets the current block; writes still in flight on it are
// cancelled (they report as stale events).
func (s *putStream) closeBlock() {
	b := s.blk
	b.cancel()
	s.c.writes.put(b.pc)
	s.blk = nil
}

// failover ends the current block at its last checkpoint and writes the
// rest of its bytes to a new block on another pipeline.
func (s *putStream) failover(cause error, excludePipeline bool) error {
	b := s.blk
	s.res.Failovers++
	if excludePipeline && !slices.Contains(s.res.Excluded, b.pipeline) {
		s.res.Excluded = append(s.res.Excluded, b.pipeline)
	}
	if s.res.Failovers > s.o.MaxFailovers {
		return fmt.Errorf("%w: %d blocks failed (pipelines %v), last on pipeline %d: %w", ErrPipelineFailed, s.res.Failovers, s.res.Excluded, b.pipeline, cause)
	}
	s.c.log.Warn("keyclient: block failed, continuing on a new one",
		"key", s.bucket+"/"+s.key, "pipeline", b.pipeline, "block", fmt.Sprintf("%d/%d", b.ref.Container, b.ref.Local),
		"kept_bytes", b.committedLen, "rewritten_bytes", b.fill-b.committedLen, "err", cause)
	carried := b.buf
	b.buf = nil
	if b.committedLen > 0 {
		s.blocks = append(s.blocks, metaapi.KeyBlock{BlockRef: metaapi.BlockRef{Container: b.ref.Container, Local: b.ref.Local}, Pipeline: b.pipeline, Length: b.committedLen})
	}
	base := b.base + b.committedLen
	s.closeBlock()
	if len(carried) == 0 {
		return nil
	}
	nb, err := s.openBlock(base)
	if err != nil {
		return fmt.Errorf("after pipeline %d failed (%v): %w", b.pipeline, cause, err)
	}
	for _, ch := range carried {
		ch.off = nb.fill
		ch.acked, ch.sending, ch.holes = false, false, 0
		nb.fill += uint64(len(ch.data))
	}
	nb.buf = carried
	return nil
}

// commit commits the key, every block being complete.
func (s *putStream) commit() error {
	var total uint64
	for _, kb := range s.blocks {
		total += kb.Length
	}
	if total != s.size {
		panic(fmt.Sprintf("keyclient: blocks add up to %d bytes, value has %d", total, s.size))
	}
	var ki metaapi.KeyInfo
	var err error
	ck := metaapi.CommitKey{Size: s.size, Blocks: s.blocks, CRC32C: s.crc}
	if s.commitFn != nil {
		ki, err = s.commitFn(s.ctx, ck)
	} else {
		ki, err = s.c.meta.CommitKey(s.ctx, s.bucket, s.key, ck)
	}
	if err != nil {
		return fmt.Errorf("commit (%d bytes, %d blocks): %w", s.size, len(s.blocks), err)
	}
	s.res.Key = ki
	return nil
}

// cleanup cancels what is left and waits for every goroutine of the stream.
func (s *putStream) cleanup() {
	if s.blk != nil {
		s.closeBlock()
	}
	for s.outstanding > 0 {
		ev := <-s.events
		s.outstanding--
		if ev.kind == evChunk {
			ev.ch.users--
		}
	}
}

func (s *putStream) describe() string {
	b := s.blk
	if b == nil {
		return fmt.Sprintf("no block, eof=%v, size=%d", s.eof, s.size)
	}
	return fmt.Sprintf("block %d/%d fill=%d committed=%d buffered=%d acked=%d inflight=%d putting=%v eof=%v",
		b.ref.Container, b.ref.Local, b.fill, b.committedLen, len(b.buf), s.ackedPrefix(b), b.inflight, b.putting, s.eof)
}

// failure classifies an error of a chunk write or a PutBlock, returned
// after the pipeline client's own retries.
type failure int

const (
	failFatal    failure = iota // the Put fails
	failHole                    // sent too early: send again after the earlier chunks
	failBlock                   // the block cannot grow (container closed or full): a new block
	failPipeline                // the pipeline failed: a new block on another pipeline
)

func classify(err error) failure {
	var se *transport.StatusError
	if errors.As(err, &se) {
		switch se.Status {
		case transport.StatusHole:
			return failHole
		case transport.StatusNotOpen, transport.StatusContainerFull:
			return failBlock
		case transport.StatusFailed, transport.StatusNotLeader, transport.StatusUnavailable, transport.StatusNotFound:
			// NotLeader and Unavailable reach here once the pipeline
			// client's retries gave up; NotFound: the pipeline is not
			// served (closed) where it was sent.
			return failPipeline
		}
		return failFatal // Invalid, Overlap, ChecksumMismatch, Corrupt, Internal, ...
	}
	if errors.Is(err, client.ErrCorrupt) || errors.Is(err, client.ErrClosed) ||
		errors.Is(err, transport.ErrTooLarge) || errors.Is(err, transport.ErrInvalid) || errors.Is(err, context.Canceled) {
		return failFatal
	}
	return failPipeline // dial failures, broken connections, timeouts after every retry
}
