package pipeline

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/transport"
)

// TestCorruptChunkRefusedAsItArrives: a WriteChunk whose 3rd piece does
// not match its checksum is refused as it arrives, from its first step of
// pieces: its client budget admission is given back before the rest of
// its payload is even sent; it is answered CHECKSUM_MISMATCH (at the bad
// piece's offset), never proposed or written; the rest of its payload is
// dropped and the next write on the same connection succeeds. Before, the
// whole payload was read (and held against the budget) before a byte of it
// was verified: the budget wait below timed out.
func TestCorruptChunkRefusedAsItArrives(t *testing.T) {
	n := startLone(t, Config{}, true)
	const size, piece = 1 << 20, engine.DefaultBytesPerChecksum
	good := chunkData(77, 0, size)
	sums := engine.ComputeChecksums(nil, good, piece)
	bad := bytes.Clone(good)
	bad[2*piece+5] ^= 0x40
	frame := func(req uint64, data []byte) []byte {
		var e transport.Encoder
		if err := e.Append(&transport.WriteChunk{RequestID: req, PipelineID: 1, ContainerID: 5, LocalID: 77, Length: size, BytesPerChecksum: piece, Checksums: sums}, data); err != nil {
			t.Fatal(err)
		}
		var out []byte
		for _, b := range e.Buffers() {
			out = append(out, b...)
		}
		return out
	}
	nc, err := net.Dial("tcp", n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, nc)
	if err := nc.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	f1 := frame(1, bad)
	cut := len(f1) - size + transport.CheckStepBytes // the header and the first step
	if _, err := nc.Write(f1[:cut]); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the corrupt chunk's admission given back before the rest of it arrives", func() bool {
		st := n.Budgets()
		return st.ClientPeakBytes == size && st.ClientBytes == 0
	})
	if _, err := nc.Write(append(f1[cut:], frame(2, good)...)); err != nil {
		t.Fatal(err)
	}
	r := transport.NewReader(nc, transport.ConnConfig{})
	for _, want := range []struct {
		req    uint64
		status transport.Status
		msg    string
	}{
		{1, transport.StatusChecksumMismatch, "checksum mismatch at offset 32768"},
		{2, transport.StatusOK, ""},
	} {
		f, err := r.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		var resp transport.Response
		if err := f.Decode(&resp); err != nil {
			t.Fatal(err)
		}
		if resp.RequestID != want.req || resp.Status != want.status || !strings.Contains(resp.Message, want.msg) {
			t.Fatalf("response %+v, want request %d %v %q", resp, want.req, want.status, want.msg)
		}
	}
	if got := testCounter(t, n.metrics.refusals.WithLabelValues(KindWriteChunk.String())); got != 1 {
		t.Fatalf("%v write chunk refusals, want 1", got)
	}
	if got := testCounter(t, n.metrics.proposals.WithLabelValues(KindWriteChunk.String(), transport.StatusOK.String())); got != 1 {
		t.Fatalf("%v write chunks answered OK, want the good one", got)
	}
	if got := testCounter(t, n.metrics.proposals.WithLabelValues(KindWriteChunk.String(), transport.StatusChecksumMismatch.String())); got != 0 {
		t.Fatalf("%v write chunks proposed and refused by the engine, want none", got)
	}
	if got := testCounter(t, n.metrics.chunkWrites); got != 1 {
		t.Fatalf("%v chunks written, want the good one only", got)
	}
	got, err := n.eng.ReadChunk(engine.BlockID{Container: 5, Local: 77}, 0, size, nil)
	if err != nil || !bytes.Equal(got, good) {
		t.Fatalf("the chunk stored is not the good one (%v)", err)
	}
	waitUntil(t, "the client budget back to 0 after both writes were answered", func() bool { return n.Budgets().ClientBytes == 0 })
}
