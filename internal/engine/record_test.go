package engine

import (
	"bytes"
	"errors"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	bd := &BlockData{ID: BlockID{Container: 7, Local: 9}, BytesPerChecksum: 512, Length: 1500,
		Chunks: []ChunkInfo{{Offset: 0, Length: 1000, Checksums: []uint32{1, 2}}, {Offset: 1000, Length: 500, Checksums: []uint32{3}}}}
	enc := encodeBlockRecord(bd)
	got, err := decodeBlockRecord(enc)
	mustNo(t, err)
	if !bytes.Equal(encodeBlockRecord(got), enc) || got.Chunks[1].Offset != 1000 {
		t.Fatalf("round trip: %+v", got)
	}
	for i := range enc {
		bad := bytes.Clone(enc)
		bad[i] ^= 0x10
		if _, err := decodeBlockRecord(bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flip of byte %d not detected: %v", i, err)
		}
	}
	cr := containerRecord{ID: 3, State: StateClosed, MaxSizeBytes: 5 << 30, CreatedUnixMs: 12345, BCSID: 99}
	c2, err := decodeContainerRecord(encodeContainerRecord(cr))
	if err != nil || c2 != cr {
		t.Fatalf("container record round trip: %+v %v", c2, err)
	}
	vr := volumeRecord{FormatVersion: volumeFormatVersion, UUID: [16]byte{1, 2, 3}, CreatedUnixMs: 99}
	v2, err := decodeVolumeRecord(encodeVolumeRecord(vr))
	if err != nil || v2 != vr {
		t.Fatalf("volume record round trip: %+v %v", v2, err)
	}
}

// The decoders read bytes from disk: they must never panic, never allocate
// beyond the input's bounds, and anything they accept must re-encode to the
// same bytes (one encoding per value, so a record cannot be read two ways).

func FuzzDecodeBlockRecord(f *testing.F) {
	f.Add(encodeBlockRecord(&BlockData{ID: BlockID{Container: 1, Local: 2}, BytesPerChecksum: 512, Length: 600,
		Chunks: []ChunkInfo{{Offset: 0, Length: 600, Checksums: []uint32{5, 6}}}}))
	f.Add(encodeBlockRecord(&BlockData{ID: BlockID{Container: 1, Local: 3}, BytesPerChecksum: 16384}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		bd, err := decodeBlockRecord(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decode error not ErrCorrupt: %v", err)
			}
			return
		}
		if err := validateBlockData(bd); err != nil && len(bd.Chunks) > 0 {
			t.Fatalf("accepted a record that does not validate: %v", err)
		}
		if !bytes.Equal(encodeBlockRecord(bd), b) {
			t.Fatalf("accepted record does not re-encode to the same bytes")
		}
	})
}

func FuzzDecodeContainerRecord(f *testing.F) {
	f.Add(encodeContainerRecord(containerRecord{ID: 1, State: StateOpen, MaxSizeBytes: 1 << 30, BCSID: 7}))
	f.Add(encodeContainerRecordV1(containerRecord{ID: 1, State: StateOpen, MaxSizeBytes: 1 << 30}))
	f.Add([]byte("short"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeContainerRecord(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decode error not ErrCorrupt: %v", err)
			}
			return
		}
		enc := encodeContainerRecord(r)
		if len(b) == containerRecordSizeV1 {
			enc = encodeContainerRecordV1(r) // still read, no longer written
		}
		if !bytes.Equal(enc, b) {
			t.Fatalf("accepted record does not re-encode to the same bytes")
		}
	})
}

func FuzzDecodeVolumeRecord(f *testing.F) {
	f.Add(encodeVolumeRecord(volumeRecord{FormatVersion: volumeFormatVersion, UUID: [16]byte{9}}))
	f.Add(make([]byte, volumeRecordSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeVolumeRecord(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decode error not ErrCorrupt: %v", err)
			}
			return
		}
		if !bytes.Equal(encodeVolumeRecord(r), b) {
			t.Fatalf("accepted record does not re-encode to the same bytes")
		}
	})
}
