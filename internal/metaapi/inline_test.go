package metaapi

import (
	"bytes"
	"errors"
	"testing"
)

func TestInlineBody(t *testing.T) {
	ck := CommitKey{Size: 3, CRC32C: 7}
	b, err := EncodeInline(ck, []byte("abc"))
	if err != nil {
		t.Fatal(err)
	}
	var got CommitKey
	v, err := DecodeInline(b, &got)
	if err != nil || !bytes.Equal(v, []byte("abc")) || got.Size != 3 || got.CRC32C != 7 {
		t.Fatalf("round trip: %v, %q, %+v", err, v, got)
	}
	for n := range 4 + len(b) - 4 - 3 { // every cut inside the length or the JSON
		if _, err := DecodeInline(b[:n], &got); !errors.Is(err, ErrInvalid) {
			t.Fatalf("cut to %d bytes: %v, want ErrInvalid", n, err)
		}
	}
}

// FuzzDecodeInline: no body makes DecodeInline panic; what it accepts
// re-encodes to the same value bytes.
func FuzzDecodeInline(f *testing.F) {
	b, _ := EncodeInline(KeyInfo{Bucket: "b", Key: "k", Size: 2}, []byte("hi"))
	f.Add(b)
	f.Add([]byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, body []byte) {
		var ki KeyInfo
		v, err := DecodeInline(body, &ki)
		if err != nil {
			return
		}
		if !bytes.HasSuffix(body, v) {
			t.Fatal("the value is not the body's tail")
		}
	})
}
