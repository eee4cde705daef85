package teragen

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
)

// Row 0 of every TeraGen/gensort data set: the key "JimGrayRIP" is the
// well-known first record of gensort, the rest follows the layout.
func TestRowZero(t *testing.T) {
	var p [RowSize]byte
	Row(p[:], 0)
	want := "JimGrayRIP\x00\x11" + "00000000000000000000000000000000" + "\x88\x99\xaa\xbb" +
		"222200002222000022220000222200002222000000001111" + "\xcc\xdd\xee\xff"
	if string(p[:]) != want {
		t.Fatalf("row 0 =\n%q\nwant\n%q", p[:], want)
	}
}

func TestRowLayout(t *testing.T) {
	var p [RowSize]byte
	Row(p[:], 0x1234ABCD)
	if got := string(p[12:44]); got != "0000000000000000000000001234ABCD" {
		t.Errorf("row number field %q", got)
	}
	hi, lo := Random(0x1234ABCD)
	for i := range 8 {
		if p[i] != byte(hi>>(56-8*i)) {
			t.Fatalf("key byte %d", i)
		}
	}
	if p[8] != byte(lo>>56) || p[9] != byte(lo>>48) {
		t.Fatal("key bytes 8, 9")
	}
	for i := range 12 {
		for j := range 4 {
			if p[48+4*i+j] != hexDigits[lo>>(44-4*i)&0xf] {
				t.Fatalf("filler digit %d copy %d", i, j)
			}
		}
	}
	for off, b := range map[int]byte{10: 0, 11: 0x11, 44: 0x88, 47: 0xbb, 96: 0xcc, 99: 0xff} {
		if p[off] != b {
			t.Errorf("byte %d = %#x, want %#x", off, p[off], b)
		}
	}
}

// Skipping ahead is the same as stepping, from 0 and from anywhere.
func TestSkipAheadMatchesStepping(t *testing.T) {
	var x u128
	for n := uint64(0); n < 2000; n++ {
		if got := skipAhead(n); got != x {
			t.Fatalf("skipAhead(%d) = %x, stepping gives %x", n, got, x)
		}
		x = next(x)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		n := rng.Uint64N(1 << 40)
		x := skipAhead(n)
		for k := range uint64(20) {
			if got := skipAhead(n + k); got != x {
				t.Fatalf("skipAhead(%d) ≠ skipAhead(%d) stepped %d times", n+k, n, k)
			}
			x = next(x)
		}
	}
}

// A Reader gives exactly the rows Row gives, whatever the read sizes, and
// the checksum of those rows.
func TestReaderAnyReadSizes(t *testing.T) {
	const start, count = 777, 513
	want := make([]byte, 0, count*RowSize)
	var sum uint64
	var p [RowSize]byte
	for r := uint64(start); r < start+count; r++ {
		Row(p[:], r)
		want = append(want, p[:]...)
		sum += RowChecksum(p[:])
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, sizes := range []func() int{
		func() int { return 1 },
		func() int { return 99 },
		func() int { return 100 },
		func() int { return 101 },
		func() int { return 4096 },
		func() int { return 1 + rng.IntN(350) },
	} {
		r, err := NewReader(start, count)
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		for range 2 * count * RowSize { // bounded: at least a byte per read
			buf := make([]byte, sizes())
			n, err := r.Read(buf)
			got = append(got, buf[:n]...)
			if err == io.EOF {
				break
			}
			if err != nil || n == 0 {
				t.Fatalf("read: %d, %v", n, err)
			}
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("reader bytes differ (%d vs %d bytes)", len(got), len(want))
		}
		if r.Checksum() != sum || r.Remaining() != 0 {
			t.Fatalf("checksum %d remaining %d, want %d and 0", r.Checksum(), r.Remaining(), sum)
		}
	}
}

func TestReaderBounds(t *testing.T) {
	if _, err := NewReader(MaxRows, 1); err == nil {
		t.Error("range past MaxRows accepted")
	}
	r, _ := NewReader(5, 0)
	if n, err := r.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Errorf("empty range: %d, %v", n, err)
	}
}

// The checksum of disjoint ranges adds up (writers sum their parts), and
// the Summer finds the same over a stream cut anywhere.
func TestChecksumAddsAndSummer(t *testing.T) {
	checksum := func(first, n uint64) uint64 {
		t.Helper()
		v, err := Checksum(first, n)
		if err != nil {
			t.Fatalf("Checksum(%d, %d): %v", first, n, err)
		}
		return v
	}
	all, a, b := checksum(10, 3000), checksum(10, 1234), checksum(1244, 1766)
	if a+b != all {
		t.Fatalf("%d + %d ≠ %d", a, b, all)
	}
	r, _ := NewReader(10, 3000)
	var s Summer
	rng := rand.New(rand.NewPCG(5, 6))
	for range 3000 * RowSize {
		buf := make([]byte, 1+rng.IntN(700))
		n, err := r.Read(buf)
		if _, werr := s.Write(buf[:n]); werr != nil {
			t.Fatal(werr)
		}
		if err == io.EOF {
			break
		}
	}
	rows, sum, err := s.Result()
	if err != nil || rows != 3000 || sum != all {
		t.Fatalf("summer: %d rows, %d, %v; want 3000 rows, %d", rows, sum, err, all)
	}
	if _, err := s.Write([]byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Result(); !errors.Is(err, ErrPartialRow) {
		t.Errorf("partial row: %v", err)
	}
}

// TestChecksumSeed001: Hadoop's TeraGen of 10 GB (10^8 rows) printed
// CHECKSUM=214760662691937609 (shared/seeds/001): the one check of row
// format and checksum against Hadoop's own figure. About 6 s of CPU (3 s on
// two cores); skipped with -short.
func TestChecksumSeed001(t *testing.T) {
	if testing.Short() {
		t.Skip("10^8 rows; run without -short")
	}
	const rows = 100_000_000
	parts := runtime.NumCPU()
	sums := make([]uint64, parts)
	var wg sync.WaitGroup
	for i := range parts {
		wg.Go(func() {
			s, e := uint64(i)*rows/uint64(parts), uint64(i+1)*rows/uint64(parts)
			var err error
			if sums[i], err = Checksum(s, e-s); err != nil {
				t.Errorf("Checksum(%d, %d): %v", s, e-s, err)
			}
		})
	}
	wg.Wait()
	var total uint64
	for _, s := range sums {
		total += s
	}
	if total != 214760662691937609 {
		t.Fatalf("checksum of 10^8 rows %d, Hadoop's TeraGen printed 214760662691937609", total)
	}
}

func BenchmarkReader(b *testing.B) {
	r, _ := NewReader(0, MaxRows)
	buf := make([]byte, 4<<20)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if _, err := r.Read(buf); err != nil {
			b.Fatal(err)
		}
	}
}
