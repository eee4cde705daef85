package keyclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"

	"github.com/spindle-store/spindle/internal/client"
	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/ecread"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/transport"
)

// ErrRange is a range that does not lie within the value.
var ErrRange = errors.New("range not satisfiable")

// GetOptions are the settings of one Get.
type GetOptions struct {
	// Progress, when set, is called with the bytes written to the writer
	// so far, from the Get's goroutine.
	Progress func(done int64)
	// ClipRange: a GetRange whose length runs past the end of the value
	// reads what exists, as S3 serves such a range (an offset past the
	// end is still ErrRange).
	ClipRange bool
	// Looked, when set, is called with the key's metadata each time the
	// get looks it up, before any byte is read (a caller sizes its
	// progress from it).
	Looked func(ki metaapi.KeyInfo)
}

// Get writes the value of bucket/key to w and returns its metadata. The
// value's CRC32C is checked at the end: on ErrCorrupt, what was written to
// w must be discarded.
func (c *Client) Get(ctx context.Context, bucket, key string, w io.Writer, opts GetOptions) (metaapi.KeyInfo, error) {
	return c.getRange(ctx, bucket, key, 0, -1, w, opts)
}

// GetRange writes length bytes of bucket/key's value from offset to w
// (length < 0: to the end of the value). The range must lie within the
// value (ErrRange otherwise).
func (c *Client) GetRange(ctx context.Context, bucket, key string, offset, length int64, w io.Writer, opts GetOptions) (metaapi.KeyInfo, error) {
	return c.getRange(ctx, bucket, key, offset, length, w, opts)
}

// MaxVersionRetries bounds the times a get starts again because the
// version it looked up was replaced or deleted before its first bytes
// were read.
const MaxVersionRetries = 3

// getRange looks the key up and reads it. A get that meets a version
// replaced or deleted meanwhile (its first block gone from every replica,
// nothing written to w yet) looks the key up again and reads what it is
// now, or answers not found when it is gone: a reader sees a version
// whole or the key absent, never an error for a race with a writer.
func (c *Client) getRange(ctx context.Context, bucket, key string, offset, length int64, w io.Writer, opts GetOptions) (metaapi.KeyInfo, error) {
	for try := 0; ; try++ {
		ki, err := c.Stat(ctx, bucket, key)
		if err != nil {
			return ki, err
		}
		n := length
		if opts.ClipRange && offset >= 0 && uint64(offset) <= ki.Size && (n < 0 || uint64(offset)+uint64(n) > ki.Size) {
			n = int64(ki.Size) - offset
		}
		if opts.Looked != nil {
			opts.Looked(ki)
		}
		cw := &CountingWriter{W: w}
		err = c.ReadKey(ctx, ki, offset, n, cw, opts)
		if err == nil {
			return ki, nil
		}
		if cw.N == 0 && try < MaxVersionRetries && blockGone(err) {
			continue
		}
		return ki, fmt.Errorf("get %s/%s: %w", bucket, key, err)
	}
}

// blockGone says whether err is a block every replica answered NOT_FOUND
// for (deleted after its key version was replaced or deleted).
func blockGone(err error) bool {
	var re replicaErrors
	if !errors.As(err, &re) || len(re) == 0 {
		return false
	}
	for _, e := range re {
		var se *transport.StatusError
		if !errors.As(e, &se) || se.Status != transport.StatusNotFound {
			return false
		}
	}
	return true
}

// CountingWriter counts the bytes written through it to W (N).
type CountingWriter struct {
	W io.Writer
	N int64
}

func (cw *CountingWriter) Write(p []byte) (int, error) {
	n, err := cw.W.Write(p)
	cw.N += int64(n)
	return n, err
}

// ReadKey writes length bytes from offset of the value ki describes to w
// (length < 0: to the end). A read of the whole value checks its CRC32C.
// It is Get and GetRange without the meta service's lookup (benches that
// hold the KeyInfo already).
func (c *Client) ReadKey(ctx context.Context, ki metaapi.KeyInfo, offset, length int64, w io.Writer, opts GetOptions) error {
	if offset < 0 || uint64(offset) > ki.Size {
		return fmt.Errorf("%w: offset %d of a %d-byte value", ErrRange, offset, ki.Size)
	}
	if length < 0 {
		length = int64(ki.Size) - offset
	}
	if uint64(offset)+uint64(length) > ki.Size {
		return fmt.Errorf("%w: %d bytes at %d of a %d-byte value", ErrRange, length, offset, ki.Size)
	}
	if len(ki.Blocks) == 0 && ki.Size > 0 {
		return readInline(ki, offset, length, w, opts)
	}
	var total uint64
	for i, kb := range ki.Blocks {
		if kb.Length > 0 && len(kb.Members) == 0 {
			return fmt.Errorf("block %d (%d/%d) has no replica addresses in the key's metadata", i, kb.Container, kb.Local)
		}
		total += kb.Length
	}
	if total != ki.Size {
		return fmt.Errorf("%w: key metadata: blocks add up to %d bytes, size is %d", ErrCorrupt, total, ki.Size)
	}
	whole := offset == 0 && uint64(length) == ki.Size
	g := &getStream{c: c, ki: ki, w: w, progress: opts.Progress, whole: whole,
		pcs: make(map[int]*pooled), pref: make([]atomic.Int32, len(ki.Blocks))}
	ctx, cancel := context.WithCancel(ctx)
	err := g.run(ctx, uint64(offset), uint64(length))
	cancel()
	g.wait()
	for _, pc := range g.pcs {
		c.reads.put(pc)
	}
	if err != nil {
		return err
	}
	if whole && g.crc != ki.CRC32C {
		return fmt.Errorf("%w: value's crc32c %08x, key records %08x", ErrCorrupt, g.crc, ki.CRC32C)
	}
	return nil
}

// readInline writes length bytes from offset of a value stored inline
// (ki.Inline) to w, having checked the whole value's CRC32C (the meta
// service checked it at the commit; this checks what travelled).
func readInline(ki metaapi.KeyInfo, offset, length int64, w io.Writer, opts GetOptions) error {
	if uint64(len(ki.Inline)) != ki.Size {
		return fmt.Errorf("%w: key metadata: %d bytes inline, size is %d", ErrCorrupt, len(ki.Inline), ki.Size)
	}
	if sum := crc32c.Checksum(ki.Inline); sum != ki.CRC32C {
		return fmt.Errorf("%w: inline value's crc32c %08x, key records %08x", ErrCorrupt, sum, ki.CRC32C)
	}
	n, err := w.Write(ki.Inline[offset : offset+length])
	if opts.Progress != nil && n > 0 {
		opts.Progress(int64(n))
	}
	if err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

// getStream is one read of a key, owned by its goroutine; reads of ranges
// run in goroutines that fill their readReq and close its done channel.
type getStream struct {
	c        *Client
	ki       metaapi.KeyInfo
	w        io.Writer
	progress func(int64)
	whole    bool
	crc      uint32
	written  int64
	pcs      map[int]*pooled // read clients by block index
	pref     []atomic.Int32  // per block: the replica to try first
	pending  []*readReq      // in value order
}

type readReq struct {
	block    int
	off, len uint64 // in the block
	done     chan struct{}
	data     []byte
	sums     []uint32 // CRC32C of each piece of data (bpc bytes), verified
	bpc      uint32
	release  func() // gives data back to the transport's pool (nil: nothing to give)
	err      error
}

func (g *getStream) run(ctx context.Context, offset, length uint64) error {
	// Walk the blocks from the one holding offset.
	bi, boff := 0, offset
	for bi < len(g.ki.Blocks) && boff >= g.ki.Blocks[bi].Length && length > 0 {
		boff -= g.ki.Blocks[bi].Length
		bi++
	}
	left := length
	next := func() (*readReq, bool) {
		for left > 0 && bi < len(g.ki.Blocks) && boff >= g.ki.Blocks[bi].Length {
			bi, boff = bi+1, 0
		}
		if left == 0 || bi >= len(g.ki.Blocks) {
			return nil, false
		}
		n := min(left, g.ki.Blocks[bi].Length-boff, uint64(g.c.opts.ReadSize))
		r := &readReq{block: bi, off: boff, len: n, done: make(chan struct{})}
		boff += n
		left -= n
		return r, true
	}
	for {
		for len(g.pending) < g.c.opts.ReadInFlight {
			r, ok := next()
			if !ok {
				break
			}
			if err := g.start(ctx, r); err != nil {
				return err
			}
		}
		if len(g.pending) == 0 {
			if left > 0 {
				panic(fmt.Sprintf("keyclient: %d bytes left to read past the last block", left))
			}
			return nil
		}
		r := g.pending[0]
		select {
		case <-r.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		g.pending = g.pending[1:]
		if r.err != nil {
			return r.err
		}
		if g.whole {
			if r.bpc == g.c.opts.BytesPerChecksum {
				// The pieces' CRC32Cs, verified against the bytes by
				// ReadChunk, combined: no second pass over the bytes.
				g.crc = appendPieceCRCs(g.crc, g.c.pieceShift, int(r.bpc), r.sums, len(r.data))
			} else {
				g.crc = crc32c.Update(g.crc, r.data)
			}
		}
		_, err := g.w.Write(r.data)
		n := len(r.data)
		if r.release != nil {
			r.data = nil // Write keeps no reference (io.Writer's contract)
			r.release()
		}
		if err != nil {
			return fmt.Errorf("writing the value: %w", err)
		}
		g.written += int64(n)
		if g.progress != nil {
			g.progress(g.written)
		}
	}
}

// start starts the read of r.
func (g *getStream) start(ctx context.Context, r *readReq) error {
	kb := &g.ki.Blocks[r.block]
	pc := g.pcs[r.block]
	if pc == nil {
		var err error
		if pc, err = g.c.reads.get(kb.Pipeline, memberAddrs(kb.Members)); err != nil {
			return err
		}
		g.pcs[r.block] = pc
	}
	g.pending = append(g.pending, r)
	pref := &g.pref[r.block]
	go func() {
		defer close(r.done)
		var ch client.Chunk
		ch, r.release, r.err = readReplicas(ctx, pc.c, g.c.ec, kb, pref, r.off, r.len)
		r.data, r.sums, r.bpc = ch.Data, ch.Checksums, ch.BytesPerChecksum
	}()
	return nil
}

// readReplicas reads a range of a block from its replicas in turn, from
// the preferred one, until one answers with verified bytes (and their
// pieces' checksums). A replica that fails makes the next one preferred for
// later reads of the block.
//
// The chunk's bytes are lent (client.ReadChunkLent): release gives them
// back once written on.
//
// An erasure-coded container (ecr: known coded, or every replica failed
// and the meta service has its layout) is read from its shards instead.
func readReplicas(ctx context.Context, cl *client.Client, ecr *ecread.Reader, kb *metaapi.KeyBlock, pref *atomic.Int32, off, n uint64) (client.Chunk, func(), error) {
	id := client.BlockID{Container: kb.Container, Local: kb.Local, Token: kb.Token}
	members := kb.Members
	start := int(pref.Load())
	var errs replicaErrors
	if ecr != nil && ecr.Coded(kb.Container) {
		members = nil // its replicas are gone or going
	}
	for i := range members {
		k := (start + i) % len(members)
		ch, release, err := cl.ReadChunkLent(ctx, members[k].Addr, id, off, n)
		if err == nil {
			return ch, release, nil
		}
		if ctx.Err() != nil {
			return client.Chunk{}, nil, ctx.Err()
		}
		var se *transport.StatusError
		if errors.As(err, &se) && se.Status == transport.StatusCorrupt {
			err = fmt.Errorf("%w: %w", ErrCorrupt, err) // damage found on the replica's disk
		}
		errs = append(errs, fmt.Errorf("%s: %w", members[k].Addr, err))
		pref.CompareAndSwap(int32(k), int32((k+1)%len(members)))
	}
	if ecr != nil {
		data, err := ecr.ReadBlock(ctx, kb.Container, kb.Local, off, n)
		if err == nil {
			return client.Chunk{Offset: off, Data: data}, nil, nil
		}
		if !errors.Is(err, ecread.ErrNotCoded) {
			errs = append(errs, err)
		}
	}
	return client.Chunk{}, nil, fmt.Errorf("read %d bytes at %d of block %s (pipeline %d): every replica failed: %w", n, off, id, kb.Pipeline, errs)
}

// replicaErrors are the errors of every replica of a read, on one line;
// errors.Is finds any of them (ErrCorrupt among them, say).
type replicaErrors []error

func (e replicaErrors) Error() string {
	s := make([]string, len(e))
	for i, err := range e {
		s[i] = err.Error()
	}
	return strings.Join(s, "; ")
}

func (e replicaErrors) Unwrap() []error { return e }

// wait waits for every read started (each bounded by the read client's
// attempts and timeouts per replica).
func (g *getStream) wait() {
	for _, r := range g.pending {
		<-r.done
	}
	g.pending = nil
}
