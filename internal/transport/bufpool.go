package transport

import (
	"fmt"
	"math/bits"
	"runtime"
	"sync"
	"unsafe"
)

// Payload buffer pool: power-of-two size classes from 4 KiB to the class
// that holds MaxPayloadBytes. Buffers travel as *[]byte so that putting one
// back does not allocate.
const (
	minPoolShift = 12
	maxPoolShift = 27 // 128 MiB ≥ MaxPayloadBytes
)

var payloadPools [maxPoolShift + 1]sync.Pool

func poolShift(n int) int {
	if n <= 1<<minPoolShift {
		return minPoolShift
	}
	return bits.Len(uint(n - 1))
}

// getBuf returns a buffer of length n (≤ MaxPayloadBytes) from the pool.
func getBuf(n int) *[]byte {
	s := poolShift(n)
	if p, ok := payloadPools[s].Get().(*[]byte); ok {
		*p = (*p)[:n]
		return p
	}
	b := make([]byte, n, 1<<s)
	return &b
}

// putBuf returns a buffer from getBuf to the pool; nil is ignored.
func putBuf(p *[]byte) {
	if p == nil {
		return
	}
	c := cap(*p)
	s := poolShift(c)
	if c != 1<<s || s > maxPoolShift {
		return
	}
	*p = (*p)[:0]
	payloadPools[s].Put(p)
}

// Recycled payload buffers (NewPayload): for payloads whose lifetime no
// single owner knows. A received chunk's bytes are referenced by the
// proposal, the raft payload cache, the peer writers sending them to the
// followers and the append worker, each letting go at its own time; an
// explicit Put would need a reference count on every one of those paths,
// and one missed count would hand live chunk bytes to the next frame. So
// the garbage collector decides: a buffer is handed out again only after
// the collector found no reference to any part of it (a finalizer on the
// buffer's first byte puts it on a free list instead of letting it go).
// What this saves on a datanode writing 1 MiB chunks: the page faults and
// zeroing of a fresh 1 MiB allocation per chunk (Go returns freed spans to
// the OS; the next allocation faults each 4 KiB page in again and zeroes
// it), 0.2-0.4 CPU-s per GB on the 2-core VM.
//
// Size classes: four per power of two (waste ≤ 25 %), from
// recycleMinBytes (Go allocates larger objects page by page; smaller
// ones come from warm spans) to MaxPayloadBytes. The free lists hold at
// most their bound in all (SetPayloadRecycleLimit, recycleMaxFreeBytes
// at most); a buffer that does not fit is left to the collector.
//
// Why NewPayload starts collections. Buffers come back only when a
// collection runs, and the collector paces itself by new allocation: a
// hit allocates nothing, so with a warm free list collections grow rare,
// buffers let go meanwhile wait unrecycled, the list runs dry and every
// payload is a fresh allocation again until the heap has grown enough
// for the next collection (half the payloads were, measured). So when the
// free lists fall under a quarter of their bound, once half their bound
// has been handed out since the last one, a collection is started in
// the background (one at a time): at 300 MB/s of payloads that is at
// most five a second, each cheap (payload buffers hold no pointers; a
// datanode's pointerful heap is small).
const (
	recycleMinBytes     = 32 << 10
	recycleMaxFreeBytes = 128 << 20
)

var recycled = recycler{free: map[int][]*byte{}, finalizer: map[int]func(*byte){}}

type recycler struct {
	mu        sync.Mutex
	free      map[int][]*byte // capacity → first bytes of free buffers
	freeBytes int
	finalizer map[int]func(*byte)
	reused    uint64 // buffers handed out again (tests)
	// sinceGC: bytes handed out since the last collection NewPayload
	// started; collecting: one is running.
	sinceGC    int
	collecting bool
	// maxFreeBytes (SetPayloadRecycleLimit; 0: recycleMaxFreeBytes)
	// bounds the free lists.
	maxFreeBytes int
	// created (tests only, nil otherwise): each buffer's class when it was
	// allocated, by address (not a pointer: it must not keep buffers
	// alive); NewPayload panics on a free-list buffer filed under
	// another class.
	created map[uintptr]int
}

// recycleClass is the capacity NewPayload gives a payload of n bytes
// (recycleMinBytes ≤ n ≤ MaxPayloadBytes): n rounded up to an eighth of
// the power of two above it (for n in (1, 2] MiB: 1.25, 1.5, 1.75 or 2
// MiB), so four classes per power of two.
func recycleClass(n int) int {
	step := 1 << (bits.Len(uint(n-1)) - 3)
	return (n + step - 1) / step * step
}

// NewPayload returns a buffer of n bytes for a received payload, from the
// buffers the garbage collector found unreferenced when one of its class
// is free, else newly allocated. Its contents are undefined (the caller
// fills all n bytes before anyone reads them); it is never handed out
// again while any slice of it is reachable. Safe for concurrent use.
func NewPayload(n int) []byte {
	if n < recycleMinBytes || n > MaxPayloadBytes {
		return make([]byte, n)
	}
	c := recycleClass(n)
	r := &recycled
	r.mu.Lock()
	var p *byte
	// The smallest free buffer of this class or of the next four (at
	// most twice the size: a follower's frames batch a varying number of
	// chunks, so their sizes spread over neighbouring classes).
	for k, fc := 0, c; k <= 4 && p == nil; k, fc = k+1, recycleClass(fc+1) {
		if l := r.free[fc]; len(l) > 0 {
			p = l[len(l)-1]
			l[len(l)-1] = nil
			r.free[fc] = l[:len(l)-1]
			r.freeBytes -= fc
			r.reused++
			c = fc
		}
	}
	if p != nil && r.created != nil {
		if was, ok := r.created[uintptr(unsafe.Pointer(p))]; ok && was != c {
			r.mu.Unlock()
			panic(fmt.Sprintf("transport: recycled buffer of %d bytes on the free list of %d", was, c))
		}
	}
	fin := r.finalizerOf(c)
	r.sinceGC += c
	if limit := r.limit(); r.freeBytes < limit/4 && r.sinceGC >= limit/2 && !r.collecting {
		r.collecting, r.sinceGC = true, 0
		go collect()
	}
	r.mu.Unlock()
	if p == nil {
		b := make([]byte, c)
		p = &b[0]
		if r.created != nil {
			r.mu.Lock()
			r.created[uintptr(unsafe.Pointer(p))] = c
			r.mu.Unlock()
		}
	}
	runtime.SetFinalizer(p, fin)
	return unsafe.Slice(p, c)[:n:n]
}

// finalizerOf returns the finalizer of the buffers of capacity c, made
// once per class (r.mu held). c is this function's own parameter: a
// closure over a variable the caller changes later would file the
// buffers under another class, and hand out more bytes than they have.
func (r *recycler) finalizerOf(c int) func(*byte) {
	fin := r.finalizer[c]
	if fin == nil {
		fin = func(p *byte) { recycle(c, p) }
		r.finalizer[c] = fin
	}
	return fin
}

// limit is the free lists' bound (r.mu held).
func (r *recycler) limit() int {
	if r.maxFreeBytes > 0 {
		return r.maxFreeBytes
	}
	return recycleMaxFreeBytes
}

// SetPayloadRecycleLimit bounds the bytes of free payload buffers this
// process keeps for reuse (at most recycleMaxFreeBytes, 128 MiB): memory
// held beyond what the payloads in use take. A datanode sets a quarter of
// its payload budgets, so that a flood that fills them leaves at most that
// much more behind.
func SetPayloadRecycleLimit(n int64) {
	recycled.mu.Lock()
	recycled.maxFreeBytes = int(max(recycleMinBytes, min(n, recycleMaxFreeBytes)))
	recycled.mu.Unlock()
}

// collect runs a collection, whose finalizers refill the free lists.
func collect() {
	runtime.GC()
	recycled.mu.Lock()
	recycled.collecting = false
	recycled.mu.Unlock()
}

// recycle is the finalizer of a NewPayload buffer of capacity c: nothing
// references it any more. It is kept for reuse while the free lists have
// room (which makes it reachable again: a finalizer may), else dropped
// (its finalizer has run: the next collection frees it).
func recycle(c int, p *byte) {
	r := &recycled
	r.mu.Lock()
	defer r.mu.Unlock()
	limit := r.limit()
	if r.created != nil {
		limit = 1 << 40 // tests: every buffer comes back (they check where)
	}
	if r.freeBytes+c > limit {
		return
	}
	r.free[c] = append(r.free[c], p)
	r.freeBytes += c
}
