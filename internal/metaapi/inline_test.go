package metaapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/spindle-store/spindle/internal/crc32c"
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

// A commit answered UNAVAILABLE inside a batch (its member stopped leading
// in the middle of the batch: outcome unknown) is tried again alone, on
// the route that follows the leader; the others keep their answers.
func TestBatchItemUnavailableRetriedAlone(t *testing.T) {
	var alone atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == CommitsRoute:
			body, _ := io.ReadAll(r.Body)
			items, err := DecodeCommitBatch(body)
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			res := CommitBatchResult{}
			for _, it := range items {
				if it.Key == "lost" {
					res.Results = append(res.Results, CommitResult{Error: &Error{Code: CodeUnavailable, Message: "leadership lost"}})
				} else if it.Key == "bad" {
					res.Results = append(res.Results, CommitResult{Error: &Error{Code: CodeInvalid, Message: "bad"}})
				} else {
					res.Results = append(res.Results, CommitResult{Key: &KeyInfo{Bucket: it.Bucket, Key: it.Key, Size: it.Size}})
				}
			}
			encodeT(t, w, res)
		case strings.HasPrefix(r.URL.Path, "/v1/keys/bkt/lost"):
			alone.Add(1)
			encodeT(t, w, KeyInfo{Bucket: "bkt", Key: "lost", Size: 1})
		default:
			http.Error(w, "unexpected "+r.URL.Path, 500)
		}
	}))
	defer srv.Close()
	cl, err := NewClient(srv.URL, ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ki, err := cl.CommitKey(ctx, "bkt", "lost", CommitKey{Size: 1, CRC32C: crc32c.Checksum([]byte("x")), Inline: []byte("x")})
	if err != nil || ki.Key != "lost" || alone.Load() != 1 {
		t.Fatalf("commit answered UNAVAILABLE in its batch: %+v, %v, %d tries alone; want it committed alone once", ki, err, alone.Load())
	}
	if _, err := cl.CommitKey(ctx, "bkt", "bad", CommitKey{}); !errors.Is(err, ErrInvalid) || alone.Load() != 1 {
		t.Fatalf("commit refused INVALID in its batch: %v (%d tries alone); want the refusal, not retried", err, alone.Load())
	}
	if ki, err := cl.CommitKey(ctx, "bkt", "ok", CommitKey{}); err != nil || ki.Key != "ok" {
		t.Fatalf("commit: %+v, %v", ki, err)
	}
}
