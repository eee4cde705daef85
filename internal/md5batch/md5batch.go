// Package md5batch computes many independent MD5 digests at once: a
// Batcher hashes the writes of the Digests it made 16 at a time on one core
// with AVX-512 (block16, from minio/md5-simd), which costs a few times
// less CPU per byte than crypto/md5 when enough streams are hashing at
// once, as the S3 gateway's PUTs are (each computes its object's MD5
// ETag). MD5 is serial within a stream: one stream gains nothing.
//
// # Scheduling
//
// WriteAsync queues the whole blocks of a write (a piece) behind the
// digest's earlier ones and returns: the writer goes on (reads more of the
// body, sends it to the datanodes) while its bytes wait. One combiner
// goroutine, started when there is work due and ended when there is none,
// hashes the digests that have pieces queued, each in a lane, in rounds of
// at most RoundBytes per lane. Work is due when every lane can be filled
// (Lanes digests with bytes queued) or when someone waits for a digest
// (Wait, Sum, Reuse): then every digest with bytes queued goes along, up
// to Lanes, those waited for first, the others in turn round by round
// (pick). So lanes fill, and hashing is
// deferred, never skipped: a sum waits for its digest's pieces. A round of
// fewer than MinLanes lanes hashes only the digests waited for, with
// crypto/md5's block function (faster for so few). Small writes of a
// digest with nothing queued, and every write on a CPU without AVX-512,
// are hashed by crypto/md5 in the writer's goroutine.
//
// # Invariants
//
// A Digest's sum is crypto/md5's of the bytes written, whatever the
// batching (TestDigestMatchesCryptoMD5): a digest's pieces are hashed in
// the order written, and a write completing a block held back (d.x) is
// queued as a piece of its own. The bytes of a WriteAsync are read until
// they are hashed: the caller must not change them before the digest's
// Wait, Sum or Reset returns, or Reuse of them (TestWriteAsyncReuse).
//
// # Concurrency
//
// A Batcher is safe for concurrent use; one per process is the intent
// (the more streams share it, the fuller its lanes). A Digest, like any
// hash.Hash, is used by one goroutine at a time. A lane's fields are
// under Batcher.mu, but for the state s, which only the combiner touches
// while the lane has bytes queued (the digest reads it after Wait).
package md5batch

import (
	"crypto/md5"
	"encoding"
	"encoding/binary"
	"hash"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Limits of the batching.
const (
	// Lanes is the most digests hashed at once (block16's width).
	Lanes = 16
	// MinLanes is the fewest digests a round hashes with block16: with
	// fewer, crypto/md5 on each is faster (block16 costs the same for 1
	// lane as for 16, about 2.7 lanes' worth of crypto/md5).
	MinLanes = 3
	// RoundBytes bounds the bytes of a lane in one round: a digest that
	// gets bytes queued during a round waits at most that long to join.
	RoundBytes = 64 << 10
	// MinBatchBytes is the smallest write of a digest with nothing queued
	// that is batched; a smaller one is hashed in the writer's goroutine
	// (the hand-off would cost more than the lanes save).
	MinBatchBytes = 4 << 10
)

// md5 state and marshaling (crypto/md5's binary format: magic, the four
// state words big-endian, the pending block, the length big-endian).
const (
	init0, init1, init2, init3 = 0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476

	md5Magic         = "md5\x01"
	md5MarshaledSize = len(md5Magic) + 4*4 + md5.BlockSize + 8
)

// Batcher hashes the queued pieces of its Digests, Lanes at a time.
type Batcher struct {
	mu      sync.Mutex
	queue   []*lane // with bytes queued, not in the combiner's lanes
	running bool    // the combiner goroutine runs
	// scalar is crypto/md5 as a block function, the combiner's (one at a
	// time: running orders them).
	scalar hash.Hash

	stats struct{ rounds, laneRounds, simdBytes, scalarBytes atomic.Int64 }
}

// New returns a Batcher.
func New() *Batcher { return &Batcher{scalar: md5.New()} }

// Stats are a Batcher's counters since New.
type Stats struct {
	// Rounds of block16, and the lanes they hashed in all (LaneRounds /
	// Rounds is the mean occupancy, of Lanes).
	Rounds, LaneRounds int64
	// SIMDBytes were hashed by block16, ScalarBytes by the combiner with
	// crypto/md5 (the writers' own small writes are not counted).
	SIMDBytes, ScalarBytes int64
}

// Stats returns b's counters.
func (b *Batcher) Stats() Stats {
	return Stats{Rounds: b.stats.rounds.Load(), LaneRounds: b.stats.laneRounds.Load(),
		SIMDBytes: b.stats.simdBytes.Load(), ScalarBytes: b.stats.scalarBytes.Load()}
}

// lane is a digest's queue of pieces (whole blocks) not hashed yet.
type lane struct {
	s      *[4]uint32
	data   []byte   // the current piece's bytes not hashed yet
	pieces [][]byte // the pieces after it, in order
	queued int      // bytes of data and pieces
	inQ    bool     // in Batcher.queue or the combiner's lanes
	// wake, when set, is closed once queued is 0 (someone waits).
	wake chan struct{}
}

// Digest is an MD5 hash.Hash whose writes go through a Batcher.
type Digest struct {
	b   *Batcher
	s   [4]uint32
	x   [md5.BlockSize]byte // bytes of the last block, nx of them
	nx  int
	len uint64
	// h hashes the small writes (crypto/md5 as a block function);
	// allocated at the first one.
	h hash.Hash
	l lane
	// busy: pieces may be queued (cleared by Wait).
	busy bool
}

var _ hash.Hash = (*Digest)(nil)

// NewDigest returns a new MD5 digest hashed through b.
func (b *Batcher) NewDigest() *Digest {
	d := &Digest{b: b}
	d.l.s = &d.s
	d.Reset()
	return d
}

func (d *Digest) Reset() {
	d.Wait()
	d.s = [4]uint32{init0, init1, init2, init3}
	d.nx, d.len = 0, 0
}

func (d *Digest) Size() int      { return md5.Size }
func (d *Digest) BlockSize() int { return md5.BlockSize }

// Write hashes p (hash.Hash's contract: p is not retained).
func (d *Digest) Write(p []byte) (int, error) {
	d.WriteAsync(p)
	d.Wait()
	return len(p), nil
}

// WriteAsync hashes p, perhaps later: p must not change until the
// digest's Wait, Sum or Reset returns (or Reuse of p does).
func (d *Digest) WriteAsync(p []byte) {
	d.len += uint64(len(p))
	if d.nx > 0 {
		k := copy(d.x[d.nx:], p)
		d.nx += k
		p = p[k:]
		if d.nx < md5.BlockSize {
			return
		}
		d.nx = 0
		if d.busy {
			d.enqueue(slices.Clone(d.x[:])) // after the pieces queued
		} else {
			d.scalarBlocks(d.x[:])
		}
	}
	if whole := len(p) &^ (md5.BlockSize - 1); whole > 0 {
		if haveBlock16 && (d.busy || whole >= MinBatchBytes) {
			d.enqueue(p[:whole])
		} else {
			d.scalarBlocks(p[:whole])
		}
		p = p[whole:]
	}
	d.nx = copy(d.x[:], p)
}

// enqueue queues piece behind the digest's others.
func (d *Digest) enqueue(piece []byte) {
	b, l := d.b, &d.l
	d.busy = true
	b.mu.Lock()
	if l.queued == 0 {
		l.data = piece
	} else { // behind data and the pieces (data may be empty, pieces not)
		l.pieces = append(l.pieces, piece)
	}
	l.queued += len(piece)
	if !l.inQ {
		l.inQ = true
		b.queue = append(b.queue, l)
	}
	b.kick()
	b.mu.Unlock()
}

// Wait returns once every write so far is hashed.
func (d *Digest) Wait() {
	if !d.busy {
		return
	}
	b, l := d.b, &d.l
	b.mu.Lock()
	if l.queued == 0 {
		b.mu.Unlock()
		d.busy = false
		return
	}
	wake := make(chan struct{})
	l.wake = wake
	b.kick()
	b.mu.Unlock()
	<-wake
	d.busy = false
}

// Reuse returns once the digest no longer reads p's bytes (at once when
// p overlaps none of those queued): the caller may then overwrite them.
func (d *Digest) Reuse(p []byte) {
	if !d.busy {
		return
	}
	b, l := d.b, &d.l
	b.mu.Lock()
	needed := overlap(p, l.data)
	for _, q := range l.pieces {
		needed = needed || overlap(p, q)
	}
	b.mu.Unlock()
	if needed {
		d.Wait()
	}
}

// overlap reports whether a and b share a byte.
func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return a0 < b0+uintptr(len(b)) && b0 < a0+uintptr(len(a))
}

func (d *Digest) scalarBlocks(p []byte) {
	if d.h == nil {
		d.h = md5.New()
	}
	scalarBlocks(d.h, &d.s, p)
}

// Sum appends the digest of the bytes written to in (d is unchanged).
func (d *Digest) Sum(in []byte) []byte {
	d.Wait()
	h := md5.New()
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(marshalState(&d.s, d.x[:d.nx], d.len)); err != nil {
		panic("md5batch: crypto/md5 refused its own state: " + err.Error())
	}
	return h.Sum(in)
}

// marshalState is crypto/md5's binary form of a state.
func marshalState(s *[4]uint32, pending []byte, length uint64) []byte {
	b := make([]byte, 0, md5MarshaledSize)
	b = append(b, md5Magic...)
	for _, v := range s {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	b = append(b, pending...)
	b = append(b, make([]byte, md5.BlockSize-len(pending))...)
	return binary.BigEndian.AppendUint64(b, length)
}

// scalarBlocks runs p (whole blocks) through crypto/md5's block function
// from state s, with h as the vehicle.
func scalarBlocks(h hash.Hash, s *[4]uint32, p []byte) {
	var buf [md5MarshaledSize]byte // pending block and length: zero
	b := append(buf[:0], md5Magic...)
	for _, v := range s {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(buf[:]); err != nil {
		panic("md5batch: crypto/md5 refused its own state: " + err.Error())
	}
	h.Write(p)
	b, err := h.(encoding.BinaryAppender).AppendBinary(buf[:0])
	if err != nil {
		panic("md5batch: crypto/md5 state: " + err.Error())
	}
	for i := range s {
		s[i] = binary.BigEndian.Uint32(b[len(md5Magic)+4*i:])
	}
}

// kick starts the combiner when it is not running and work is due (b.mu
// held).
func (b *Batcher) kick() {
	if !b.running && due(b.queue) {
		b.running = true
		go b.combine()
	}
}

// due reports whether lanes should be hashed now: every lane can be
// filled, or someone waits for one (the others go along).
func due(lanes []*lane) bool {
	if len(lanes) >= Lanes {
		return true
	}
	for _, l := range lanes {
		if l.wake != nil {
			return true
		}
	}
	return false
}

// combine is the combiner goroutine: it hashes rounds of the queued lanes
// while any is due.
func (b *Batcher) combine() {
	lanes := make([]*lane, 0, Lanes)
	var work [Lanes][]byte
	b.mu.Lock()
	for {
		lanes = b.pick(lanes)
		if !due(lanes) {
			// Nothing due (the queue is empty): the lanes wait for
			// others to join them or for someone to wait.
			b.queue = append(b.queue, lanes...)
			b.running = false
			b.mu.Unlock()
			return
		}
		if len(lanes) < MinLanes {
			// Too few for block16: hash the ones waited for only.
			kept := lanes[:0]
			for _, l := range lanes {
				if l.wake != nil {
					kept = append(kept, l)
				} else {
					b.queue = append(b.queue, l)
				}
			}
			clear(lanes[len(kept):])
			lanes = kept
		}
		for i, l := range lanes {
			if len(l.data) == 0 {
				l.data, l.pieces[0] = l.pieces[0], nil
				l.pieces = l.pieces[1:]
			}
			work[i] = l.data[:min(len(l.data), RoundBytes)]
		}
		b.mu.Unlock()
		b.round(lanes, work[:len(lanes)])
		b.mu.Lock()
		kept := lanes[:0]
		for i, l := range lanes {
			n := len(work[i])
			work[i] = nil
			l.data = l.data[n:]
			l.queued -= n
			if l.queued > 0 {
				kept = append(kept, l)
				continue
			}
			l.inQ = false
			l.data, l.pieces = nil, l.pieces[:0]
			if l.wake != nil {
				close(l.wake)
				l.wake = nil
			}
		}
		clear(lanes[len(kept):])
		lanes = kept
	}
}

// pick returns the lanes of the next round: every lane (those of the last
// round, then the queue) in turn, those someone waits for first, up to
// Lanes; the others stay queued, in order. So with more than Lanes digests
// streaming, each gets its turn, and one waited for is not held up behind
// long uploads. b.mu held.
func (b *Batcher) pick(last []*lane) []*lane {
	q := append(b.queue, last...)
	lanes := last[:0]
	urgent := 0
	for _, l := range q {
		if l.wake != nil {
			urgent++
		}
	}
	others := Lanes - min(urgent, Lanes) // slots left for lanes not waited for
	rest := q[:0]                        // compacted in place: written at or behind the read
	for _, l := range q {
		switch {
		case len(lanes) < Lanes && l.wake != nil:
			lanes = append(lanes, l)
		case len(lanes) < Lanes && l.wake == nil && others > 0:
			lanes = append(lanes, l)
			others--
		default:
			rest = append(rest, l)
		}
	}
	clear(q[len(rest):])
	b.queue = rest
	if len(rest) == 0 {
		b.queue = nil // let the array go
	}
	return lanes
}

// round hashes work[i] (whole blocks, not empty) into lanes[i].s.
func (b *Batcher) round(lanes []*lane, work [][]byte) {
	if len(lanes) < MinLanes || !haveBlock16 {
		for i, l := range lanes {
			scalarBlocks(b.scalar, l.s, work[i])
			b.stats.scalarBytes.Add(int64(len(work[i])))
		}
		return
	}
	b.block16(lanes, work)
}

// digest16 is 16 MD5 states, lane-interleaved, as block16 takes them.
type digest16 struct {
	v0, v1, v2, v3 [Lanes]uint32
}

// block16 hashes work[i] into lanes[i].s with block16, in as many calls as
// there are distinct lengths (a lane leaves the mask at its end). A lane
// block16 cannot reach (its bytes more than 2 GiB from the first lane's:
// offsets are signed 32-bit) is hashed by crypto/md5 instead.
func (b *Batcher) block16(lanes []*lane, work [][]byte) {
	base := uintptr(unsafe.Pointer(unsafe.SliceData(work[0])))
	var st digest16
	var offs [Lanes]int32
	var mask uint64
	var ends []int // distinct lengths of the lanes in the mask
	total := 0
	for i, l := range lanes {
		w := work[i]
		off, ok := laneOffset(base, uintptr(unsafe.Pointer(unsafe.SliceData(w))), len(w))
		if !ok {
			scalarBlocks(b.scalar, l.s, w)
			b.stats.scalarBytes.Add(int64(len(w)))
			continue
		}
		offs[i], mask = off, mask|1<<i
		st.v0[i], st.v1[i], st.v2[i], st.v3[i] = l.s[0], l.s[1], l.s[2], l.s[3]
		if !slices.Contains(ends, len(w)) {
			ends = append(ends, len(w))
		}
		total += len(w)
	}
	slices.Sort(ends)
	done := 0
	for _, end := range ends {
		block16(&st.v0[0], base+uintptr(done), &offs[0], mask, end-done)
		done = end
		b.stats.rounds.Add(1)
		b.stats.laneRounds.Add(int64(bitsSet(mask)))
		for i := range lanes {
			if mask&(1<<i) != 0 && len(work[i]) == end {
				lanes[i].s[0], lanes[i].s[1], lanes[i].s[2], lanes[i].s[3] = st.v0[i], st.v1[i], st.v2[i], st.v3[i]
				mask &^= 1 << i
			}
		}
	}
	runtime.KeepAlive(work) // block16 read their bytes by address
	b.stats.simdBytes.Add(int64(total))
}

// bitsSet counts the bits of m.
func bitsSet(m uint64) int {
	n := 0
	for ; m != 0; m &= m - 1 {
		n++
	}
	return n
}

// laneOffset is p's offset from base as block16 reads it (a signed 32-bit
// offset to which it adds up to n bytes); ok is false when it does not fit.
func laneOffset(base, p uintptr, n int) (int32, bool) {
	off := int64(p - base) // two's complement: negative when p < base
	if off < math.MinInt32 || off > math.MaxInt32-int64(n) {
		return 0, false
	}
	return int32(off), true
}
