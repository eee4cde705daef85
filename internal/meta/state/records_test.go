package state

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
	node := NodeRecord{ID: 3, Registered: t0, UUID: "0123abcd", Addr: "127.0.0.1:9001", MetricsURL: "http://127.0.0.1:9002/metrics"}
	pipe := PipelineRecord{ID: 2, State: PipelineClosed, Created: t0, Closed: t0.Add(time.Minute), Members: []uint64{1, 2, 3}}
	cont := ContainerRecord{ID: 5, Pipeline: 2, State: ContainerClosing, Created: t0, NextLocal: 8, Committed: 1 << 20}
	bkt := BucketRecord{Created: t0, Keys: 2, Bytes: 300}
	key := KeyRecord{Size: 300, CRC32C: 0xdeadbeef, Created: t0, Blocks: []StoredBlock{{5, 1, 2, 100}, {5, 2, 2, 200}}}
	alloc := AllocRecord{Allocated: t0, Bucket: "bkt", Key: "a/b"}
	dl := DeleteRecord{Scheduled: t0, Reason: ReasonReplaced}
	ctr := Counters{NextNode: 4, NextPipeline: 3, NextContainer: 6}
	om := &metaapi.ObjectMeta{ETag: "0123456789abcdef0123456789abcdef", ContentType: "text/plain", ChecksumType: "FULL_OBJECT", Parts: 2,
		Headers: map[string]string{"Cache-Control": "no-cache"}, UserMeta: map[string]string{"a": "1", "b": "2"}, Checksums: map[string]string{"CRC32": "AAAAAA=="}}
	s3bkt := BucketRecord{Created: t0, Keys: 1, Bytes: 5, Owner: "AKIAOWNER0000000001", ACL: `{"Owner":"AKIAOWNER0000000001"}`}
	s3pol := BucketRecord{Created: t0, Keys: 1, Bytes: 5, Owner: "AKIAOWNER0000000001", ACL: `{"Owner":"AKIAOWNER0000000001"}`,
		Policy: `{"Statement":[]}`, Ownership: "ObjectWriter"}
	s3key := KeyRecord{Size: 300, CRC32C: 7, Created: t0, Blocks: []StoredBlock{{5, 1, 2, 300}}, Object: om}
	mpom := *om
	mpom.PartSizes = []uint64{200, 100}
	mpkey := KeyRecord{Size: 300, CRC32C: 7, Created: t0, Blocks: []StoredBlock{{5, 1, 2, 200}, {5, 2, 2, 100}}, Object: &mpom}
	user := UserRecord{Created: t0, AccessKey: "AKIAOWNER0000000001", SecretKey: "secret-0123456789"}
	sealedUser := UserRecord{Created: t0, AccessKey: "minioadmin", Sealed: bytes.Repeat([]byte{0xa5}, 10+29)}
	upload := UploadRecord{Initiated: t0, Owner: "AKIAOWNER0000000001", Object: &metaapi.ObjectMeta{ContentType: "video/mp4"}}
	inl := KeyRecord{Size: 5, CRC32C: 0x9a71bb4c, Created: t0, Inline: []byte("hello")}
	s3inl := KeyRecord{Size: 3, CRC32C: 7, Created: t0, Inline: []byte("abc"), Object: om}
	conf := BucketConfRecord{Updated: t0, Doc: "<CORSConfiguration/>"}
	part := PartRecord{KeyRecord: KeyRecord{Size: 100, CRC32C: 9, Created: t0, Blocks: []StoredBlock{{5, 3, 2, 100}}}, ETag: "abc", Checksums: map[string]string{"SHA256": "x"}}
	return []struct {
		name   string
		value  []byte
		decode func([]byte) (any, error)
		want   any
	}{
		{"counters", ctr.Encode(), func(v []byte) (any, error) { return DecodeCounters(v) }, ctr},
		{"node", node.Encode(), func(v []byte) (any, error) { return DecodeNode(v) }, node},
		{"pipeline", pipe.Encode(), func(v []byte) (any, error) { return DecodePipeline(v) }, pipe},
		{"container", cont.Encode(), func(v []byte) (any, error) { return DecodeContainer(v) }, cont},
		{"bucket", bkt.Encode(), func(v []byte) (any, error) { return DecodeBucket(v) }, bkt},
		{"key", key.Encode(), func(v []byte) (any, error) { return DecodeKey(v) }, key},
		{"allocation", alloc.Encode(), func(v []byte) (any, error) { return DecodeAlloc(v) }, alloc},
		{"deletion", dl.Encode(), func(v []byte) (any, error) { return DecodeDelete(v) }, dl},
		{"s3 bucket", s3bkt.Encode(), func(v []byte) (any, error) { return DecodeBucket(v) }, s3bkt},
		{"s3 bucket with a policy", s3pol.Encode(), func(v []byte) (any, error) { return DecodeBucket(v) }, s3pol},
		{"s3 key", s3key.Encode(), func(v []byte) (any, error) { return DecodeKey(v) }, s3key},
		{"multipart key", mpkey.Encode(), func(v []byte) (any, error) { return DecodeKey(v) }, mpkey},
		{"user", user.Encode(), func(v []byte) (any, error) { return DecodeUser(v) }, user},
		{"sealed user", sealedUser.Encode(), func(v []byte) (any, error) { return DecodeUser(v) }, sealedUser},
		{"upload", upload.Encode(), func(v []byte) (any, error) { return DecodeUpload(v) }, upload},
		{"part", part.Encode(), func(v []byte) (any, error) { return DecodePart(v) }, part},
		{"bucket configuration", conf.Encode(), func(v []byte) (any, error) { return DecodeBucketConf(v) }, conf},
		{"inline key", inl.Encode(), func(v []byte) (any, error) { return DecodeKey(v) }, inl},
		{"s3 inline key", s3inl.Encode(), func(v []byte) (any, error) { return DecodeKey(v) }, s3inl},
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
	c := ContainerRecord{ID: 1, Pipeline: 1, State: ContainerOpen, Created: t0, NextLocal: 3, Committed: 4096}
	want := "01" + "0100000000000000" + "0100000000000000" + "01" + "888ca97c9b010000" + "0300000000000000" + "0010000000000000"
	got := hex.EncodeToString(c.Encode())
	if got[:len(want)] != want {
		t.Fatalf("container record\n got %s\nwant %s…", got, want)
	}
	if got[len(want):] != "1a4a8974" {
		t.Fatalf("container record CRC %s", got[len(want):])
	}
	k := KeyRecord{Size: 300, CRC32C: 0xdeadbeef, Created: t0, Blocks: []StoredBlock{{5, 1, 2, 100}, {5, 2, 2, 200}}}
	wantKey := "01" + "2c01000000000000" + "efbeadde" + "888ca97c9b010000" + "02000000" +
		"0500000000000000" + "0100000000000000" + "0200000000000000" + "6400000000000000" +
		"0500000000000000" + "0200000000000000" + "0200000000000000" + "c800000000000000" + "bd1b1331"
	if got := hex.EncodeToString(k.Encode()); got != wantKey {
		t.Fatalf("key record\n got %s\nwant %s", got, wantKey)
	}
	// A key without blocks holds its value inline, after the block count.
	inl := KeyRecord{Size: 5, CRC32C: 0x9a71bb4c, Created: t0, Inline: []byte("hello")}
	wantInline := "01" + "0500000000000000" + "4cbb719a" + "888ca97c9b010000" + "00000000" + "68656c6c6f" + "c4c7144f"
	if got := hex.EncodeToString(inl.Encode()); got != wantInline {
		t.Fatalf("inline key record\n got %s\nwant %s", got, wantInline)
	}
	if k := hex.EncodeToString(ObjectKey("bkt", "a/b")); k != "4b626b7400612f62" {
		t.Fatalf("key of bkt/a/b: %s", k)
	}
	if k := hex.EncodeToString(BlockKey(PrefixAlloc, 1, 2)); k != "4100000000000000010000000000000002" {
		t.Fatalf("allocation key of 1/2: %s", k)
	}
}

func TestKeyOrder(t *testing.T) {
	// The keys of a bucket sort together, before those of a bucket whose
	// name extends it.
	a, b := ObjectKey("abc", "\U0010FFFF"), ObjectKey("abc.d", "a")
	if bytes.Compare(a, b) >= 0 || bytes.Compare(PrefixEnd(KeyPrefix("abc")), b) > 0 {
		t.Fatal("bucket ranges overlap")
	}
	if PrefixEnd([]byte{0xff, 0xff}) != nil || !bytes.Equal(PrefixEnd([]byte{1, 0xff}), []byte{2}) {
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
		switch kind % 12 {
		case 0:
			if r, err := DecodeCounters(v); err == nil && !bytes.Equal(r.Encode(), v) {
				t.Fatal("counters do not re-encode")
			}
		case 1:
			if r, err := DecodeNode(v); err == nil && !bytes.Equal(r.Encode(), v) {
				t.Fatal("node does not re-encode")
			}
		case 2:
			if r, err := DecodePipeline(v); err == nil && !bytes.Equal(r.Encode(), v) {
				t.Fatal("pipeline does not re-encode")
			}
		case 3:
			if r, err := DecodeContainer(v); err == nil && !bytes.Equal(r.Encode(), v) {
				t.Fatal("container does not re-encode")
			}
		case 4:
			if r, err := DecodeBucket(v); err == nil && !bytes.Equal(r.Encode(), v) {
				t.Fatal("bucket does not re-encode")
			}
		case 5:
			if r, err := DecodeKey(v); err == nil && !bytes.Equal(r.Encode(), v) {
				t.Fatal("key does not re-encode")
			}
		case 6:
			if r, err := DecodeAlloc(v); err == nil && !bytes.Equal(r.Encode(), v) {
				t.Fatal("allocation does not re-encode")
			}
		case 7:
			if r, err := DecodeDelete(v); err == nil && !bytes.Equal(r.Encode(), v) {
				t.Fatal("deletion does not re-encode")
			}
		case 8:
			if r, err := DecodeUser(v); err == nil && !bytes.Equal(r.Encode(), v) {
				t.Fatal("user does not re-encode")
			}
		case 9:
			if r, err := DecodeUpload(v); err == nil && !bytes.Equal(r.Encode(), v) {
				t.Fatal("upload does not re-encode")
			}
		case 10:
			if r, err := DecodePart(v); err == nil && !bytes.Equal(r.Encode(), v) {
				t.Fatal("part does not re-encode")
			}
		case 11:
			if r, err := DecodeBucketConf(v); err == nil && !bytes.Equal(r.Encode(), v) {
				t.Fatal("bucket configuration does not re-encode")
			}
		}
	})
}

// TestUserRecordHoldsOneSecret: a user record holds its secret sealed or
// (written before sealing) in plaintext, never both, never neither.
func TestUserRecordHoldsOneSecret(t *testing.T) {
	for _, u := range []UserRecord{
		{AccessKey: "minioadmin", SecretKey: "plain-secret", Sealed: []byte("sealed-secret-bytes")},
		{AccessKey: "minioadmin"},
	} {
		if _, err := DecodeUser(u.Encode()); !errors.Is(err, ErrCorrupt) {
			t.Errorf("user record %+v: %v, want ErrCorrupt", u, err)
		}
	}
}
