package ec

import (
	"bytes"
	"errors"
	"testing"
)

// TestRebuild: every shard of a set, data or parity, rebuilt from the
// others (one of them corrupt in one 16 KiB chunk, another missing) is
// byte for byte the shard Encode wrote; with fewer than k good others it
// is ErrUnrecoverable, never a shard.
func TestRebuild(t *testing.T) {
	p := Policy{Data: 3, Parity: 2, CellBytes: 2 * ChunkBytes}
	data := make([]byte, 5*p.StripeBytes()+12345)
	fill(data, 5, 6)
	shards := encodeMem(t, data, p)
	for idx := range shards {
		rs := readers(shards)
		other := (idx + 1) % len(shards)
		bad := bytes.Clone(shards[other])
		bad[headerBytes+3*ChunkBytes+7] ^= 0x40 // one chunk of another shard rotten
		rs[other] = bytes.NewReader(bad)
		rs[idx] = nil
		s, err := Open(rs)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := s.Rebuild(idx, &out); err != nil {
			t.Fatalf("shard %d: %v", idx, err)
		}
		if !bytes.Equal(out.Bytes(), shards[idx]) {
			t.Fatalf("shard %d rebuilt differs from the one encoded", idx)
		}
		if _, err := VerifyShard(bytes.NewReader(out.Bytes()), int64(out.Len())); err != nil {
			t.Fatal(err)
		}
	}
	rs := readers(shards, 0, 1)
	bad := bytes.Clone(shards[2])
	bad[headerBytes+5] ^= 1
	rs[2] = bytes.NewReader(bad)
	s, err := Open(rs)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := s.Rebuild(0, &out); !errors.Is(err, ErrUnrecoverable) {
		t.Fatalf("rebuild with 2 good shards of 3 needed: %v", err)
	}
}
