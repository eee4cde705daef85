package transport

import (
	"math/bits"
	"sync"
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
