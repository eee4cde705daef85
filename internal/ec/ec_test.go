package ec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"testing"
)

// encodeMem encodes data under p into in-memory shards.
func encodeMem(t testing.TB, data []byte, p Policy) [][]byte {
	t.Helper()
	bufs := make([]*bytes.Buffer, p.Shards())
	ws := make([]io.Writer, p.Shards())
	for i := range bufs {
		bufs[i] = &bytes.Buffer{}
		ws[i] = bufs[i]
	}
	if err := Encode(bytes.NewReader(data), int64(len(data)), p, 42, ws); err != nil {
		t.Fatal(err)
	}
	out := make([][]byte, len(bufs))
	for i, b := range bufs {
		out[i] = b.Bytes()
		if int64(len(out[i])) != ShardBytes(p, int64(len(data))) {
			t.Fatalf("shard %d: %d bytes, want %d", i, len(out[i]), ShardBytes(p, int64(len(data))))
		}
	}
	return out
}

// fill fills b with seeded pseudo-random bytes.
func fill(b []byte, seed1, seed2 uint64) {
	r := rand.NewChaCha8([32]byte{byte(seed1), byte(seed2)})
	_, _ = r.Read(b) // never fails
}

func readers(shards [][]byte, missing ...int) []io.ReaderAt {
	rs := make([]io.ReaderAt, len(shards))
	for i, s := range shards {
		rs[i] = bytes.NewReader(s)
	}
	for _, m := range missing {
		rs[m] = nil
	}
	return rs
}

// checkReads reads data back from s in whole and in ranges that cross
// chunks, cells and stripes.
func checkReads(t *testing.T, s *Set, data []byte) {
	t.Helper()
	got := make([]byte, len(data))
	if n, err := s.ReadAt(got, 0); n != len(data) || (err != nil && err != io.EOF) || !bytes.Equal(got, data) {
		t.Fatalf("whole read: %d bytes, %v, equal %v", n, err, bytes.Equal(got, data))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		off := rng.Int64N(int64(len(data)))
		n := 1 + rng.IntN(min(len(data)-int(off), 3*s.p.CellBytes))
		b := make([]byte, n)
		if got, err := s.ReadAt(b, off); got != n || (err != nil && err != io.EOF) || !bytes.Equal(b, data[off:off+int64(n)]) {
			t.Fatalf("read %d at %d: %d, %v", n, off, got, err)
		}
	}
	// Chunk-aligned ranges of whole chunks and cells: read (and rebuilt)
	// in place, in the caller's buffer.
	chunks := (len(data) + ChunkBytes - 1) / ChunkBytes
	for range 50 {
		off := int64(rng.IntN(chunks)) * ChunkBytes
		n := ChunkBytes * (1 + rng.IntN(3*s.p.CellBytes/ChunkBytes))
		if rng.IntN(2) == 0 {
			off = off / int64(s.p.CellBytes) * int64(s.p.CellBytes)
			n = s.p.CellBytes * (1 + rng.IntN(3))
		}
		n = min(n, len(data)-int(off))
		b := make([]byte, n)
		if got, err := s.ReadAt(b, off); got != n || (err != nil && err != io.EOF) || !bytes.Equal(b, data[off:off+int64(n)]) {
			t.Fatalf("aligned read %d at %d: %d, %v", n, off, got, err)
		}
	}
}

// TestEncodeReadBack: every policy, sizes around stripe and chunk edges:
// read back whole and in ranges with every shard present, with any m
// shards missing (every combination for rs-3-2), and refused with m+1.
func TestEncodeReadBack(t *testing.T) {
	for _, name := range []string{"rs-3-2", "rs-6-3", "rs-10-4"} {
		p, err := ParsePolicy(name)
		if err != nil {
			t.Fatal(err)
		}
		p.CellBytes = 64 << 10 // small cells: many stripes
		for _, size := range []int{1, ChunkBytes - 1, p.CellBytes + 7, int(p.StripeBytes()), 3*int(p.StripeBytes()) + 12345} {
			t.Run(fmt.Sprintf("%s/%d", name, size), func(t *testing.T) {
				data := make([]byte, size)
				fill(data, uint64(size), 9)
				shards := encodeMem(t, data, p)
				s, err := Open(readers(shards))
				if err != nil {
					t.Fatal(err)
				}
				checkReads(t, s, data)
				if s.Reconstructions() != 0 {
					t.Fatalf("%d reconstructions with every shard present", s.Reconstructions())
				}
				missing := []int{0}
				for i := 1; i < p.Parity; i++ {
					missing = append(missing, p.Shards()-i)
				}
				s, err = Open(readers(shards, missing...))
				if err != nil {
					t.Fatal(err)
				}
				checkReads(t, s, data)
				if _, err := Open(readers(shards, append(missing, 1)...)); !errors.Is(err, ErrUnrecoverable) {
					t.Fatalf("open with %d shards missing: %v, want unrecoverable", p.Parity+1, err)
				}
			})
		}
	}
	p, _ := ParsePolicy("rs-3-2")
	p.CellBytes = ChunkBytes
	data := make([]byte, 5*int(p.StripeBytes())+100)
	fill(data, 7, 7)
	shards := encodeMem(t, data, p)
	for a := range 5 {
		for b := a + 1; b < 5; b++ {
			s, err := Open(readers(shards, a, b))
			if err != nil {
				t.Fatalf("missing %d, %d: %v", a, b, err)
			}
			checkReads(t, s, data)
		}
	}
}

// TestCorruptChunkIsRebuilt: a flipped byte in a data shard's cells is
// caught by its chunk's CRC32C and the stripe rebuilt from the others;
// flipped bytes in m+1 shards of one stripe are an error, never wrong
// bytes; a corrupt header leaves the shard out.
func TestCorruptChunkIsRebuilt(t *testing.T) {
	p, _ := ParsePolicy("rs-6-3")
	p.CellBytes = 32 << 10
	data := make([]byte, 4*int(p.StripeBytes()))
	fill(data, 3, 4)
	shards := encodeMem(t, data, p)
	shards[2][headerBytes+int(p.CellBytes)+100] ^= 0x40 // shard 2, stripe 1
	s, err := Open(readers(shards))
	if err != nil {
		t.Fatal(err)
	}
	checkReads(t, s, data)
	if s.Reconstructions() == 0 {
		t.Fatal("a corrupt chunk was read without a reconstruction")
	}
	for _, i := range []int{0, 6, 7} { // three more in stripe 1: 4 bad of 9
		shards[i][headerBytes+int(p.CellBytes)+5] ^= 1
	}
	s, err = Open(readers(shards))
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, p.StripeBytes())
	if _, err := s.ReadAt(b, p.StripeBytes()); !errors.Is(err, ErrUnrecoverable) {
		t.Fatalf("stripe with 4 bad shards of 9: %v, want unrecoverable", err)
	}
	shards[8][3] ^= 1 // header of shard 8
	s, err = Open(readers(shards))
	if err != nil {
		t.Fatal(err)
	}
	if m := s.Missing(); len(m) != 1 || m[0] != 8 {
		t.Fatalf("missing %v, want [8]", m)
	}
}

// TestPolicies: the names offered, and a clear refusal of others.
func TestPolicies(t *testing.T) {
	for name, want := range map[string]float64{"rep3": 3, "rs-3-2": 5.0 / 3, "rs-6-3": 1.5, "rs-10-4": 1.4} {
		p, err := ParsePolicy(name)
		if err != nil || p.RawOverLogical() != want {
			t.Fatalf("%s: %+v %v", name, p, err)
		}
	}
	if _, err := ParsePolicy("rs-2-1"); err == nil {
		t.Fatal("rs-2-1 accepted")
	}
}

func BenchmarkEncodeRS63(b *testing.B) {
	p, _ := ParsePolicy("rs-6-3")
	data := make([]byte, 64<<20)
	ws := make([]io.Writer, p.Shards())
	for i := range ws {
		ws[i] = io.Discard
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if err := Encode(bytes.NewReader(data), int64(len(data)), p, 1, ws); err != nil {
			b.Fatal(err)
		}
	}
}

// TestGenerations: shards of a later generation carry it (version 2), read
// back as a set of that generation; a set mixing two generations of the
// same container is refused shard by shard (they are not one set), and
// generation 0 is written as version 1, byte for byte as before.
func TestGenerations(t *testing.T) {
	p := Policy{Data: 2, Parity: 1, CellBytes: ChunkBytes}
	data := make([]byte, 5*ChunkBytes+123)
	for i := range data {
		data[i] = byte(i * 7)
	}
	enc := func(gen uint32) [][]byte {
		bufs := make([]bytes.Buffer, p.Shards())
		dst := make([]io.Writer, p.Shards())
		for i := range bufs {
			dst[i] = &bufs[i]
		}
		if err := EncodeGeneration(bytes.NewReader(data), int64(len(data)), p, 9, gen, dst); err != nil {
			t.Fatal(err)
		}
		out := make([][]byte, len(bufs))
		for i := range bufs {
			out[i] = bufs[i].Bytes()
		}
		return out
	}
	g0, g3 := enc(0), enc(3)
	if g0[0][8] != 1 || g3[0][8] != 2 {
		t.Fatalf("versions %d and %d, want 1 and 2", g0[0][8], g3[0][8])
	}
	info, err := VerifyShard(bytes.NewReader(g3[1]), int64(len(g3[1])))
	if err != nil || info.Generation != 3 || info.Index != 1 || info.Container != 9 {
		t.Fatalf("VerifyShard of generation 3: %+v %v", info, err)
	}
	set, err := Open([]io.ReaderAt{bytes.NewReader(g3[0]), bytes.NewReader(g3[1]), nil})
	if err != nil || set.Generation() != 3 {
		t.Fatalf("Open generation 3: %v", err)
	}
	got := make([]byte, len(data))
	if _, err := set.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read generation 3: %v", err)
	}
	mixed, err := Open([]io.ReaderAt{bytes.NewReader(g0[0]), bytes.NewReader(g3[1]), bytes.NewReader(g0[2])})
	if err != nil || !slices.Equal(mixed.Missing(), []int{1}) || mixed.Generation() != 0 {
		t.Fatalf("a set mixing generations: %v (missing %v)", err, mixed.Missing())
	}
}
