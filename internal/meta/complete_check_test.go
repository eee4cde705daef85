package meta

import (
	"crypto/md5"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// TestCompleteUploadCheckedInside: a multipart completion's authorization
// is decided inside its mutation, with the key as it is then (issue 32):
// an upload begun on a new key whose key another caller creates before
// the completion is an overwrite to that check — refused for a caller
// that may write but not delete, the other's key left whole and the
// upload still there — and a new key to it otherwise. The check sees the
// bucket and key it decides on.
//
// Fails with the check's call removed from CompleteUploadAs (the
// completion replaces the key created meanwhile).
func TestCompleteUploadCheckedInside(t *testing.T) {
	c := threeNodes(t, nil)
	etag := func(n uint32) string { s := md5.Sum([]byte{byte(n)}); return hex.EncodeToString(s[:]) }
	upload := func(key string) metaapi.UploadRef {
		up := must[*metaapi.Upload](t)(c.s.CreateUpload(&metaapi.CreateUpload{Bucket: "bkt", Key: key}))
		a := must[*metaapi.AllocateResponse](t)(c.s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: key}))
		must[*metaapi.Part](t)(c.s.CommitPart(&metaapi.CommitPart{UploadRef: up.UploadRef, Number: 1, Size: 5,
			Blocks: []metaapi.KeyBlock{{BlockRef: a.Block, Pipeline: a.Pipeline.ID, Length: 5}}, ETag: etag(1)}))
		return up.UploadRef
	}
	errNoDelete := errors.New("write alone: no overwrite")
	type call struct {
		bucket, key string
		exists      bool
	}
	var calls []call
	writeOnly := func(bucket, key string, exists bool) error {
		calls = append(calls, call{bucket, key, exists})
		if exists {
			return errNoDelete
		}
		return nil
	}
	parts := []metaapi.CompletePart{{Number: 1, ETag: etag(1)}}

	// The upload is begun while the key does not exist; another caller
	// creates it before the completion.
	ref := upload("raced")
	v := []byte("the other's")
	must[*metaapi.KeyInfo](t)(c.s.CommitKey("bkt", "raced", &metaapi.CommitKey{Size: uint64(len(v)), CRC32C: crc32c.Checksum(v), Inline: v}))
	_, err := c.s.CompleteUploadAs(&metaapi.CompleteUpload{UploadRef: ref, Parts: parts}, writeOnly)
	if !errors.Is(err, errNoDelete) {
		t.Fatalf("completion over a key created meanwhile, write alone: %v, want refused", err)
	}
	if len(calls) != 1 || calls[0] != (call{"bkt", "raced", true}) {
		t.Fatalf("checks: %+v, want one, on bkt/raced existing", calls)
	}
	ki := must[*metaapi.KeyInfo](t)(c.s.GetKey("bkt", "raced"))
	if string(ki.Inline) != "the other's" || ki.Object != nil && ki.Object.Parts != 0 {
		t.Fatalf("the key after the refused completion: %+v", ki)
	}
	if _, err := c.s.GetUpload(ref); err != nil {
		t.Fatalf("the upload after the refused completion: %v, want still there", err)
	}

	// A key nobody created: a new key to the check, allowed.
	calls = nil
	ref2 := upload("fresh")
	ki = must[*metaapi.KeyInfo](t)(c.s.CompleteUploadAs(&metaapi.CompleteUpload{UploadRef: ref2, Parts: parts}, writeOnly))
	if ki.Size != 5 || len(calls) != 1 || calls[0] != (call{"bkt", "fresh", false}) {
		t.Fatalf("completion of a new key: %+v, checks %+v", ki, calls)
	}
}
