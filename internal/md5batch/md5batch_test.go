package md5batch

import (
	"bytes"
	"crypto/md5"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
)

// randomBytes is n deterministic pseudo-random bytes.
func randomBytes(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// writeInPieces writes data to d in pieces of random sizes (1 byte to
// 3×RoundBytes, so that some are batched and some are not, and some
// start inside a block).
func writeInPieces(t testing.TB, d *Digest, data []byte, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 11))
	for len(data) > 0 {
		n := min(len(data), 1+rng.IntN(3*RoundBytes))
		if rng.IntN(4) == 0 {
			n = min(len(data), 1+rng.IntN(200))
		}
		if k, err := d.Write(data[:n]); k != n || err != nil {
			t.Fatalf("Write: %d, %v", k, err)
		}
		data = data[n:]
	}
}

// TestDigestMatchesCryptoMD5: streams written at once, in pieces of every
// kind, through one Batcher, sum as crypto/md5 does; with AVX-512, some
// rounds were hashed 16 lanes at once (so the comparison covers block16);
// Reset and Sum keep the digest usable.
func TestDigestMatchesCryptoMD5(t *testing.T) {
	b := New()
	const streams = 40
	sizes := []int{0, 1, 63, 64, 65, MinBatchBytes - 1, MinBatchBytes, MinBatchBytes + 1, 1 << 20, 1<<20 + 17, 3*RoundBytes + 64, 5 << 20}
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for i := range streams {
		wg.Go(func() {
			size := sizes[i%len(sizes)]
			data := randomBytes(uint64(i), size)
			d := b.NewDigest()
			writeInPieces(t, d, data, uint64(i))
			want := md5.Sum(data)
			if got := d.Sum(nil); !bytes.Equal(got, want[:]) {
				errs <- fmt.Errorf("stream %d (%d bytes): %x, crypto/md5 %x", i, size, got, want)
				return
			}
			if got := d.Sum([]byte("x")); !bytes.Equal(got[1:], want[:]) || got[0] != 'x' {
				errs <- fmt.Errorf("stream %d: a second Sum differs, or did not append", i)
				return
			}
			d.Reset()
			if _, err := d.Write(data); err != nil {
				errs <- err
				return
			}
			if got := d.Sum(nil); !bytes.Equal(got, want[:]) {
				errs <- fmt.Errorf("stream %d after Reset, one write: %x, crypto/md5 %x", i, got, want)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := b.Stats()
	if haveBlock16 && st.Rounds == 0 {
		t.Errorf("no round hashed by block16 with %d streams at once", streams)
	}
	t.Logf("AVX-512: %v, %+v", haveBlock16, st)
}

// TestWriteAsyncReuse: writers that reuse two buffers, as the key client
// does, calling Reuse before they overwrite one, get crypto/md5's sums.
// A job stays queued until enough others join it or someone waits (a lone
// writer's always does), so the bytes of a write are read after WriteAsync
// returns: without Reuse, the sums differ.
func TestWriteAsyncReuse(t *testing.T) {
	b := New()
	var wg sync.WaitGroup
	for i := range 24 {
		if i == 1 {
			wg.Wait() // the first writer alone
		}
		wg.Go(func() {
			data := randomBytes(uint64(100+i), 3<<20+i*1000)
			rng := rand.New(rand.NewPCG(uint64(i), 5))
			bufs := [2][]byte{make([]byte, 1<<20), make([]byte, 1<<20)}
			d := b.NewDigest()
			for rest := data; len(rest) > 0; {
				buf := bufs[rng.IntN(2)]
				d.Reuse(buf)
				n := min(len(rest), 1+rng.IntN(len(buf)))
				copy(buf, rest[:n])
				d.WriteAsync(buf[:n])
				rest = rest[n:]
			}
			if want := md5.Sum(data); !bytes.Equal(d.Sum(nil), want[:]) {
				t.Errorf("stream %d: %x, crypto/md5 %x", i, d.Sum(nil), want)
			}
		})
	}
	wg.Wait()
}

// TestPieceOrderAfterPark: a digest whose current piece was hashed while
// later ones wait in its queue, parked (too few lanes, no one waiting),
// hashes a new write after those: 15 digests queue two pieces each and a
// 16th one piece, which fills the lanes; the round hashes every first
// piece and the combiner parks with 15 lanes; digest 1 then writes a third
// piece.
func TestPieceOrderAfterPark(t *testing.T) {
	if !haveBlock16 {
		t.Skip("no AVX-512")
	}
	b := New()
	var ds [Lanes]*Digest
	var data [Lanes][]byte
	for i := 1; i < Lanes; i++ {
		ds[i] = b.NewDigest()
		data[i] = randomBytes(uint64(i), 2*RoundBytes)
		ds[i].WriteAsync(data[i][:RoundBytes])
		ds[i].WriteAsync(data[i][RoundBytes:])
	}
	ds[0] = b.NewDigest()
	data[0] = randomBytes(0, RoundBytes)
	ds[0].WriteAsync(data[0]) // the 16th lane: due
	ds[0].Wait()              // the round is over; the combiner parks
	third := randomBytes(99, RoundBytes)
	ds[1].WriteAsync(third)
	data[1] = append(data[1], third...)
	for i, d := range ds {
		if want := md5.Sum(data[i]); !bytes.Equal(d.Sum(nil), want[:]) {
			t.Errorf("digest %d: %x, crypto/md5 %x", i, d.Sum(nil), want)
		}
	}
}

// TestPickWaitedForFirst: with more digests than lanes, a round takes
// the lanes someone waits for first, then the others in turn (the last
// round's go behind the queue); the rest stay queued, in order.
func TestPickWaitedForFirst(t *testing.T) {
	b := New()
	all := make([]*lane, 20)
	for i := range all {
		all[i] = &lane{}
	}
	all[1].wake, all[2].wake = make(chan struct{}), make(chan struct{}) // waited for, in the last round
	b.queue = append([]*lane(nil), all[4:]...)
	last := append(make([]*lane, 0, Lanes), all[:4]...) // the last round's
	got := b.pick(last)
	want := append(append([]*lane(nil), all[4:18]...), all[1], all[2])
	if len(got) != Lanes || !sameLanes(got, want) {
		t.Errorf("picked %v, want %v", indexes(all, got), indexes(all, want))
	}
	if wantQ := []*lane{all[18], all[19], all[0], all[3]}; !sameLanes(b.queue, wantQ) {
		t.Errorf("left queued %v, want %v", indexes(all, b.queue), indexes(all, wantQ))
	}
}

func sameLanes(a, b []*lane) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func indexes(all, ls []*lane) []int {
	var out []int
	for _, l := range ls {
		for i, m := range all {
			if l == m {
				out = append(out, i)
			}
		}
	}
	return out
}

// TestOverlap: Reuse's overlap test.
func TestOverlap(t *testing.T) {
	buf := make([]byte, 100)
	for _, c := range []struct {
		a, b []byte
		want bool
	}{
		{buf[:10], buf[10:20], false},
		{buf[:11], buf[10:20], true},
		{buf[19:30], buf[10:20], true},
		{buf[20:30], buf[10:20], false},
		{buf[:0], buf, false},
		{buf[12:13], buf[10:20], true},
	} {
		if got := overlap(c.a, c.b); got != c.want {
			t.Errorf("overlap(%d bytes, %d bytes) = %v", len(c.a), len(c.b), got)
		}
	}
}

// TestBlock16Lanes: block16 over 13 lanes of different lengths (so the
// mask shrinks between calls) whose bytes lie before and after the first
// lane's, from different states, gives each lane crypto/md5's state.
func TestBlock16Lanes(t *testing.T) {
	if !haveBlock16 {
		t.Skip("no AVX-512")
	}
	const n = 8 * md5.BlockSize
	buf := randomBytes(3, Lanes*n*2)
	b := New()
	var lanes []*lane
	var work [][]byte
	var want [][4]uint32
	for i := range Lanes {
		if i%5 == 4 {
			continue
		}
		off := ((i*7 + 3) % Lanes) * 2 * n // lane 0 is not the lowest address
		size := n - (i%4)*md5.BlockSize
		s := [4]uint32{init0, init1, init2, init3 + uint32(i)}
		lanes = append(lanes, &lane{s: &s})
		work = append(work, buf[off:off+size])
		w := s
		scalarBlocks(md5.New(), &w, buf[off:off+size])
		want = append(want, w)
	}
	b.block16(lanes, work)
	for i, l := range lanes {
		if *l.s != want[i] {
			t.Errorf("lane %d (%d bytes): %x, crypto/md5 %x", i, len(work[i]), *l.s, want[i])
		}
	}
	if st := b.Stats(); st.Rounds != 4 || st.LaneRounds != 13+9+6+3 {
		t.Errorf("%+v: want 4 calls (one per length) over 13, 9, 6 and 3 lanes", st)
	}
}

// TestLaneOffset: offsets that block16 cannot take (beyond ±2 GiB of the
// first lane's bytes, counting the n bytes it reads) are refused.
func TestLaneOffset(t *testing.T) {
	const base = uintptr(1) << 40
	for _, c := range []struct {
		p    uintptr
		n    int
		want int32
		ok   bool
	}{
		{base, 64, 0, true},
		{base + 100, 64, 100, true},
		{base - 100, 64, -100, true},
		{base - math.MaxInt32 - 1, 64, math.MinInt32, true},
		{base - math.MaxInt32 - 2, 64, 0, false},
		{base + math.MaxInt32 - 64, 64, math.MaxInt32 - 64, true},
		{base + math.MaxInt32 - 63, 64, 0, false},
	} {
		got, ok := laneOffset(base, c.p, c.n)
		if got != c.want || ok != c.ok {
			t.Errorf("laneOffset(base%+d, %d) = %d, %v; want %d, %v", int64(c.p-base), c.n, got, ok, c.want, c.ok)
		}
	}
}

// TestWithoutBlock16: on a CPU without AVX-512 every write is hashed by
// crypto/md5 (same sums, no round of block16).
func TestWithoutBlock16(t *testing.T) {
	saved := haveBlock16
	haveBlock16 = false
	defer func() { haveBlock16 = saved }()
	b := New()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			data := randomBytes(uint64(i), 1<<20+i)
			d := b.NewDigest()
			writeInPieces(t, d, data, uint64(i))
			if want := md5.Sum(data); !bytes.Equal(d.Sum(nil), want[:]) {
				t.Errorf("stream %d: %x, crypto/md5 %x", i, d.Sum(nil), want)
			}
		})
	}
	wg.Wait()
	if st := b.Stats(); st.Rounds != 0 || st.SIMDBytes != 0 {
		t.Errorf("block16 used without AVX-512: %+v", st)
	}
}

// BenchmarkParallel compares the CPU of 16 streams of 1 MiB writes hashed
// by crypto/md5 and through a Batcher (run with -cpu 1 and 2).
func BenchmarkParallel(b *testing.B) {
	data := randomBytes(1, 1<<20)
	b.Run("crypto-md5", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			h := md5.New()
			for pb.Next() {
				h.Write(data)
			}
		})
	})
	b.Run("md5batch", func(b *testing.B) {
		bt := New()
		b.SetBytes(int64(len(data)))
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			d := bt.NewDigest()
			for pb.Next() {
				if _, err := d.Write(data); err != nil {
					b.Error(err) // not Fatal: RunParallel's goroutines are not the benchmark's
					return
				}
			}
		})
	})
}
