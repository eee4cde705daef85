package meta

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/metaapi"
)

var t0 = time.UnixMilli(1767323045000).UTC()

// sampleRecords holds one encoded record of each kind with its decoder.
func sampleRecords() []struct {
	name   string
	value  []byte
	decode func([]byte) (any, error)
	want   any
} {
	node := nodeRecord{ID: 3, Registered: t0, UUID: "0123abcd", Addr: "127.0.0.1:9001", MetricsURL: "http://127.0.0.1:9002/metrics"}
	pipe := pipelineRecord{ID: 2, State: pipelineClosed, Created: t0, Closed: t0.Add(time.Minute), Members: []uint64{1, 2, 3}}
	cont := containerRecord{ID: 5, Pipeline: 2, State: containerClosing, Created: t0, NextLocal: 8, Committed: 1 << 20}
	bkt := bucketRecord{Created: t0, Keys: 2, Bytes: 300}
	key := keyRecord{Size: 300, CRC32C: 0xdeadbeef, Created: t0, Blocks: []storedBlock{{5, 1, 2, 100}, {5, 2, 2, 200}}}
	alloc := allocRecord{Allocated: t0, Bucket: "bkt", Key: "a/b"}
	dl := deleteRecord{Scheduled: t0, Reason: reasonReplaced}
	ctr := counters{NextNode: 4, NextPipeline: 3, NextContainer: 6}
	om := &metaapi.ObjectMeta{ETag: "0123456789abcdef0123456789abcdef", ContentType: "text/plain", ChecksumType: "FULL_OBJECT", Parts: 2,
		Headers: map[string]string{"Cache-Control": "no-cache"}, UserMeta: map[string]string{"a": "1", "b": "2"}, Checksums: map[string]string{"CRC32": "AAAAAA=="}}
	s3bkt := bucketRecord{Created: t0, Keys: 1, Bytes: 5, Owner: "AKIAOWNER0000000001", ACL: `{"Owner":"AKIAOWNER0000000001"}`}
	s3key := keyRecord{Size: 300, CRC32C: 7, Created: t0, Blocks: []storedBlock{{5, 1, 2, 300}}, Object: om}
	user := userRecord{Created: t0, AccessKey: "AKIAOWNER0000000001", SecretKey: "secret-0123456789"}
	upload := uploadRecord{Initiated: t0, Owner: "AKIAOWNER0000000001", Object: &metaapi.ObjectMeta{ContentType: "video/mp4"}}
	inl := keyRecord{Size: 5, CRC32C: 0x9a71bb4c, Created: t0, Inline: []byte("hello")}
	s3inl := keyRecord{Size: 3, CRC32C: 7, Created: t0, Inline: []byte("abc"), Object: om}
	part := partRecord{keyRecord: keyRecord{Size: 100, CRC32C: 9, Created: t0, Blocks: []storedBlock{{5, 3, 2, 100}}}, ETag: "abc", Checksums: map[string]string{"SHA256": "x"}}
	return []struct {
		name   string
		value  []byte
		decode func([]byte) (any, error)
		want   any
	}{
		{"counters", ctr.encode(), func(v []byte) (any, error) { return decodeCounters(v) }, ctr},
		{"node", node.encode(), func(v []byte) (any, error) { return decodeNode(v) }, node},
		{"pipeline", pipe.encode(), func(v []byte) (any, error) { return decodePipeline(v) }, pipe},
		{"container", cont.encode(), func(v []byte) (any, error) { return decodeContainer(v) }, cont},
		{"bucket", bkt.encode(), func(v []byte) (any, error) { return decodeBucket(v) }, bkt},
		{"key", key.encode(), func(v []byte) (any, error) { return decodeKey(v) }, key},
		{"allocation", alloc.encode(), func(v []byte) (any, error) { return decodeAlloc(v) }, alloc},
		{"deletion", dl.encode(), func(v []byte) (any, error) { return decodeDelete(v) }, dl},
		{"s3 bucket", s3bkt.encode(), func(v []byte) (any, error) { return decodeBucket(v) }, s3bkt},
		{"s3 key", s3key.encode(), func(v []byte) (any, error) { return decodeKey(v) }, s3key},
		{"user", user.encode(), func(v []byte) (any, error) { return decodeUser(v) }, user},
		{"upload", upload.encode(), func(v []byte) (any, error) { return decodeUpload(v) }, upload},
		{"part", part.encode(), func(v []byte) (any, error) { return decodePart(v) }, part},
		{"inline key", inl.encode(), func(v []byte) (any, error) { return decodeKey(v) }, inl},
		{"s3 inline key", s3inl.encode(), func(v []byte) (any, error) { return decodeKey(v) }, s3inl},
	}
}

func TestRecordsRoundTripAndDamage(t *testing.T) {
	sizes := map[string]int{"counters": 29, "container": 46, "bucket": 29, "deletion": 14, "pipeline": 31 + 8*3, "key": 29 + 32*2, "inline key": 29 + 5}
	for _, r := range sampleRecords() {
		got, err := r.decode(r.value)
		if err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		if !reflect.DeepEqual(got, r.want) {
			t.Fatalf("%s: decoded %+v, want %+v", r.name, got, r.want)
		}
		if n, ok := sizes[r.name]; ok && len(r.value) != n {
			t.Fatalf("%s: %d bytes, the format says %d", r.name, len(r.value), n)
		}
		// Every flipped bit, every truncation, any extra byte: ErrCorrupt.
		for i := range r.value {
			for bit := range 8 {
				v := bytes.Clone(r.value)
				v[i] ^= 1 << bit
				if _, err := r.decode(v); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("%s: bit %d of byte %d flipped: %v", r.name, bit, i, err)
				}
			}
		}
		for n := range len(r.value) {
			if _, err := r.decode(r.value[:n]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s: truncated to %d bytes: %v", r.name, n, err)
			}
		}
		if _, err := r.decode(append(bytes.Clone(r.value), 0)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: a trailing byte: %v", r.name, err)
		}
	}
}

// TestRecordBytes pins the documented bytes (docs/FORMAT.md §13).
func TestRecordBytes(t *testing.T) {
	c := containerRecord{ID: 1, Pipeline: 1, State: containerOpen, Created: t0, NextLocal: 3, Committed: 4096}
	want := "01" + "0100000000000000" + "0100000000000000" + "01" + "888ca97c9b010000" + "0300000000000000" + "0010000000000000"
	got := hex.EncodeToString(c.encode())
	if got[:len(want)] != want {
		t.Fatalf("container record\n got %s\nwant %s…", got, want)
	}
	if got[len(want):] != "1a4a8974" {
		t.Fatalf("container record CRC %s", got[len(want):])
	}
	k := keyRecord{Size: 300, CRC32C: 0xdeadbeef, Created: t0, Blocks: []storedBlock{{5, 1, 2, 100}, {5, 2, 2, 200}}}
	wantKey := "01" + "2c01000000000000" + "efbeadde" + "888ca97c9b010000" + "02000000" +
		"0500000000000000" + "0100000000000000" + "0200000000000000" + "6400000000000000" +
		"0500000000000000" + "0200000000000000" + "0200000000000000" + "c800000000000000" + "bd1b1331"
	if got := hex.EncodeToString(k.encode()); got != wantKey {
		t.Fatalf("key record\n got %s\nwant %s", got, wantKey)
	}
	// A key without blocks holds its value inline, after the block count.
	inl := keyRecord{Size: 5, CRC32C: 0x9a71bb4c, Created: t0, Inline: []byte("hello")}
	wantInline := "01" + "0500000000000000" + "4cbb719a" + "888ca97c9b010000" + "00000000" + "68656c6c6f" + "c4c7144f"
	if got := hex.EncodeToString(inl.encode()); got != wantInline {
		t.Fatalf("inline key record\n got %s\nwant %s", got, wantInline)
	}
	if k := hex.EncodeToString(objectKey("bkt", "a/b")); k != "4b626b7400612f62" {
		t.Fatalf("key of bkt/a/b: %s", k)
	}
	if k := hex.EncodeToString(blockKey(prefixAlloc, 1, 2)); k != "4100000000000000010000000000000002" {
		t.Fatalf("allocation key of 1/2: %s", k)
	}
}

func TestKeyOrder(t *testing.T) {
	// The keys of a bucket sort together, before those of a bucket whose
	// name extends it.
	a, b := objectKey("abc", "\U0010FFFF"), objectKey("abc.d", "a")
	if bytes.Compare(a, b) >= 0 || bytes.Compare(prefixEnd(keyPrefix("abc")), b) > 0 {
		t.Fatal("bucket ranges overlap")
	}
	if prefixEnd([]byte{0xff, 0xff}) != nil || !bytes.Equal(prefixEnd([]byte{1, 0xff}), []byte{2}) {
		t.Fatal("prefixEnd")
	}
}

// FuzzDecodeRecords: no input makes a decoder panic; what decodes
// re-encodes to the same bytes.
func FuzzDecodeRecords(f *testing.F) {
	for i, r := range sampleRecords() {
		f.Add(uint8(i), r.value)
	}
	f.Fuzz(func(t *testing.T, kind uint8, v []byte) {
		switch kind % 11 {
		case 0:
			if r, err := decodeCounters(v); err == nil && !bytes.Equal(r.encode(), v) {
				t.Fatal("counters do not re-encode")
			}
		case 1:
			if r, err := decodeNode(v); err == nil && !bytes.Equal(r.encode(), v) {
				t.Fatal("node does not re-encode")
			}
		case 2:
			if r, err := decodePipeline(v); err == nil && !bytes.Equal(r.encode(), v) {
				t.Fatal("pipeline does not re-encode")
			}
		case 3:
			if r, err := decodeContainer(v); err == nil && !bytes.Equal(r.encode(), v) {
				t.Fatal("container does not re-encode")
			}
		case 4:
			if r, err := decodeBucket(v); err == nil && !bytes.Equal(r.encode(), v) {
				t.Fatal("bucket does not re-encode")
			}
		case 5:
			if r, err := decodeKey(v); err == nil && !bytes.Equal(r.encode(), v) {
				t.Fatal("key does not re-encode")
			}
		case 6:
			if r, err := decodeAlloc(v); err == nil && !bytes.Equal(r.encode(), v) {
				t.Fatal("allocation does not re-encode")
			}
		case 7:
			if r, err := decodeDelete(v); err == nil && !bytes.Equal(r.encode(), v) {
				t.Fatal("deletion does not re-encode")
			}
		case 8:
			if r, err := decodeUser(v); err == nil && !bytes.Equal(r.encode(), v) {
				t.Fatal("user does not re-encode")
			}
		case 9:
			if r, err := decodeUpload(v); err == nil && !bytes.Equal(r.encode(), v) {
				t.Fatal("upload does not re-encode")
			}
		case 10:
			if r, err := decodePart(v); err == nil && !bytes.Equal(r.encode(), v) {
				t.Fatal("part does not re-encode")
			}
		}
	})
}
