package transport

import (
	"encoding/binary"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// TestNewPayloadNeverHandsOutALiveBuffer: goroutines fill payload buffers
// with their own stamp, keep some for a while among others' allocations
// and collections, and check the stamp is intact before letting go; a
// buffer handed out again while referenced would carry another stamp.
//
// With created set, NewPayload also checks that every buffer it takes
// from a free list was filed under the class it was allocated with (a
// finalizer filing it under a larger one hands out bytes past its end).
func TestNewPayloadNeverHandsOutALiveBuffer(t *testing.T) {
	const workers, rounds = 4, 400
	trackClasses(t)
	var wg sync.WaitGroup
	errs := make(chan string, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			type hold struct {
				b     []byte
				stamp uint64
			}
			var held []hold
			for i := 0; i < rounds; i++ {
				n := recycleMinBytes + (i*7919+w*104729)%(4<<20)
				b := NewPayload(n)
				stamp := uint64(w)<<32 | uint64(i)
				for off := 0; off+8 <= len(b); off += 4096 {
					binary.LittleEndian.PutUint64(b[off:], stamp)
				}
				held = append(held, hold{b, stamp})
				if len(held) > 8 {
					old := held[0]
					held = held[1:]
					for off := 0; off+8 <= len(old.b); off += 4096 {
						if got := binary.LittleEndian.Uint64(old.b[off:]); got != old.stamp {
							errs <- "a held buffer was overwritten"
							return
						}
					}
				}
				if i%50 == 0 {
					runtime.GC()
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	recycled.mu.Lock()
	reused := recycled.reused
	recycled.mu.Unlock()
	t.Logf("reused %d buffers", reused)
}

// trackClasses makes NewPayload record each new buffer's class
// (recycler.created; with it, every recycled buffer is kept) until the
// test ends.
func trackClasses(t *testing.T) {
	recycled.mu.Lock()
	recycled.created = map[uintptr]int{}
	recycled.mu.Unlock()
	t.Cleanup(func() {
		recycled.mu.Lock()
		recycled.created = nil
		recycled.mu.Unlock()
	})
}

// resetRecycler empties the free lists, forgets the finalizers made so
// far, and tracks classes (trackClasses).
func resetRecycler(t *testing.T) {
	recycled.mu.Lock()
	recycled.free = map[int][]*byte{}
	recycled.finalizer = map[int]func(*byte){}
	recycled.freeBytes = 0
	recycled.mu.Unlock()
	trackClasses(t)
}

// waitFree collects until the free list of class c holds at least want
// buffers (finalizers run on their own goroutine after a collection); the
// wait is bounded.
func waitFree(t *testing.T, c, want int) {
	t.Helper()
	for i := 0; i < 500; i++ {
		runtime.GC()
		recycled.mu.Lock()
		n := len(recycled.free[c])
		recycled.mu.Unlock()
		if n >= want {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("the free list of class %d never got %d buffers", c, want)
}

// TestRecycledBufferKeepsItsClass: a buffer goes back to the free list of
// the class it was allocated with, also when the call that first made its
// class's finalizer took a larger free buffer (best fit). Filed under the
// larger class, it would be handed out with bytes past its end. Fails
// with the finalizer as a closure over NewPayload's class variable, which
// the best-fit search changes.
func TestRecycledBufferKeepsItsClass(t *testing.T) {
	resetRecycler(t)
	const small, large = 17 << 20, 40 << 20 // classes no other test uses
	cs, cl := recycleClass(small), recycleClass(large)
	if cs == cl {
		t.Fatal("test sizes share a class")
	}
	NewPayload(large) // dropped at once: the GC recycles it into its class
	waitFree(t, cl, 1)
	x := NewPayload(small) // the first of its class: takes the free large buffer
	if cap(x) != small {
		t.Fatalf("cap %d, want %d", cap(x), small)
	}
	NewPayload(small) // a new buffer of the small class, dropped at once
	waitFree(t, cs, 1)
	recycled.mu.Lock()
	for c, l := range recycled.free {
		for _, p := range l {
			if was, ok := recycled.created[uintptr(unsafe.Pointer(p))]; ok && was != c {
				t.Errorf("a buffer of class %d is on the free list of class %d", was, c)
			}
		}
	}
	recycled.mu.Unlock()
	runtime.KeepAlive(x)
}
