package meta

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/meta/namespace"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/s3permapi"
)

// TestListDelimiter: a delimiter rolls keys up into common prefixes, each
// counting as one entry of a page; paging with Next as StartAfter visits
// every key and prefix once, in order, skipping a prefix already returned.
func TestListDelimiter(t *testing.T) {
	c := threeNodes(t, nil)
	for _, k := range []string{"a/1", "a/2", "b", "c/x/1", "c/y", "d", "e/"} {
		c.put("bkt", k, 1, 1)
	}
	var got []string
	after := ""
	for range 10 {
		l := must[*metaapi.KeyList](t)(c.s.List("bkt", namespace.ListOptions{Delimiter: "/", StartAfter: after, Limit: 2}))
		for _, k := range l.Keys {
			got = append(got, k.Key)
		}
		for _, p := range l.CommonPrefixes {
			got = append(got, "p:"+p)
		}
		if l.Next == "" {
			break
		}
		after = l.Next
	}
	// Within a page keys come before prefixes in got; compare as sets per
	// page order-insensitively by sorting the expectation the same way.
	want := "p:a/,b,p:c/,d,p:e/"
	if strings.Join(sortedByPage(got), ",") != want {
		t.Fatalf("listed %v, want %s", got, want)
	}
	l := must[*metaapi.KeyList](t)(c.s.List("bkt", namespace.ListOptions{Prefix: "c/", Delimiter: "/"}))
	if len(l.Keys) != 1 || l.Keys[0].Key != "c/y" || len(l.CommonPrefixes) != 1 || l.CommonPrefixes[0] != "c/x/" {
		t.Fatalf("prefix c/: %+v", l)
	}
}

// sortedByPage restores the listing order (keys and prefixes interleaved
// by name) of entries printed keys-first per page.
func sortedByPage(entries []string) []string {
	name := func(s string) string { return strings.TrimPrefix(s, "p:") }
	out := append([]string(nil), entries...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && name(out[j]) < name(out[j-1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// TestObjectMetaAndConditions: object metadata is stored with the key and
// survives a reopen; If-None-Match * and If-Match are checked atomically
// with the commit, and a refused commit changes nothing.
func TestObjectMetaAndConditions(t *testing.T) {
	c := threeNodes(t, nil)
	commit := func(key string, etag string, cond metaapi.Conditions) (*metaapi.KeyInfo, error) {
		a := must[*metaapi.AllocateResponse](t)(c.s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: key}))
		om := &metaapi.ObjectMeta{ETag: etag, ContentType: "text/plain", UserMeta: map[string]string{"color": "blue"},
			Headers: map[string]string{"Cache-Control": "no-cache"}, Checksums: map[string]string{"CRC32": "AAAAAA=="}}
		return c.s.CommitKey("bkt", key, &metaapi.CommitKey{Size: 10, CRC32C: 1,
			Blocks: []metaapi.KeyBlock{{BlockRef: a.Block, Length: 10}}, Object: om, Conditions: cond})
	}
	must[*metaapi.KeyInfo](t)(commit("k", "e1", metaapi.Conditions{IfNoneMatch: "*"}))
	_, err := commit("k", "e2", metaapi.Conditions{IfNoneMatch: "*"})
	wantErr(t, err, metaapi.ErrPrecondition, "If-None-Match * on an existing key")
	_, err = commit("k", "e2", metaapi.Conditions{IfMatch: `"other"`})
	wantErr(t, err, metaapi.ErrPrecondition, "If-Match of another ETag")
	must[*metaapi.KeyInfo](t)(commit("k", "e2", metaapi.Conditions{IfMatch: `"e1"`}))
	cfg := c.s.Cfg
	mustNo(t, c.s.Close())
	c.s = open(t, cfg)
	ki := must[*metaapi.KeyInfo](t)(c.s.GetKey("bkt", "k"))
	if o := ki.Object; o == nil || o.ETag != "e2" || o.ContentType != "text/plain" || o.UserMeta["color"] != "blue" ||
		o.Headers["Cache-Control"] != "no-cache" || o.Checksums["CRC32"] != "AAAAAA==" {
		t.Fatalf("after reopen: %+v", ki.Object)
	}
	l := must[*metaapi.KeyList](t)(c.s.List("bkt", namespace.ListOptions{}))
	if len(l.Keys) != 1 || l.Keys[0].Object == nil || l.Keys[0].Object.ETag != "e2" {
		t.Fatalf("listing: %+v", l.Keys)
	}
}

// TestMultipartCommit: parts claim their blocks; completion makes the key
// from the listed parts' blocks in order (ETag md5-of-md5s-N, CRC32C
// combined), schedules the unlisted part's blocks for deletion, drops the
// upload's records; an ETag that does not match, a small non-last part or
// an out-of-order list are refused and change nothing.
func TestMultipartCommit(t *testing.T) {
	c := threeNodes(t, nil)
	up := must[*metaapi.Upload](t)(c.s.CreateUpload(&metaapi.CreateUpload{Bucket: "bkt", Key: "obj",
		Object: &metaapi.ObjectMeta{ContentType: "video/mp4"}}))
	ref := up.UploadRef
	sizes := map[uint32]uint64{1: metaapi.MinPartBytes, 2: metaapi.MinPartBytes + 1, 3: 7}
	parts := map[uint32]metaapi.KeyBlock{}
	etag := func(n uint32) string { s := md5.Sum([]byte{byte(n)}); return hex.EncodeToString(s[:]) }
	for n := uint32(1); n <= 3; n++ {
		a := must[*metaapi.AllocateResponse](t)(c.s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: "obj"}))
		kb := metaapi.KeyBlock{BlockRef: a.Block, Pipeline: a.Pipeline.ID, Length: sizes[n]}
		parts[n] = kb
		must[*metaapi.Part](t)(c.s.CommitPart(&metaapi.CommitPart{UploadRef: ref, Number: n, Size: sizes[n], Blocks: []metaapi.KeyBlock{kb}, CRC32C: n, ETag: etag(n)}))
	}
	// A retried commit of part 2 succeeds and changes nothing.
	must[*metaapi.Part](t)(c.s.CommitPart(&metaapi.CommitPart{UploadRef: ref, Number: 2, Size: sizes[2], Blocks: []metaapi.KeyBlock{parts[2]}, CRC32C: 2, ETag: etag(2)}))
	pl := must[*metaapi.PartList](t)(c.s.ListParts(&metaapi.ListParts{UploadRef: ref, Limit: 2}))
	if len(pl.Parts) != 2 || pl.Next != 2 || pl.Parts[1].Size != sizes[2] {
		t.Fatalf("list parts: %+v", pl)
	}
	for _, bad := range []struct {
		parts []metaapi.CompletePart
		why   error
	}{
		{[]metaapi.CompletePart{{Number: 1, ETag: "nope"}, {Number: 2, ETag: etag(2)}}, namespace.ErrInvalidPart},
		{[]metaapi.CompletePart{{Number: 3, ETag: etag(3)}, {Number: 2, ETag: etag(2)}}, namespace.ErrPartOrder},
		{[]metaapi.CompletePart{{Number: 1, ETag: etag(1)}, {Number: 4, ETag: etag(4)}}, namespace.ErrInvalidPart},
	} {
		_, err := c.s.CompleteUpload(&metaapi.CompleteUpload{UploadRef: ref, Parts: bad.parts})
		wantErr(t, err, bad.why, fmt.Sprintf("complete %v", bad.parts))
	}
	// Part 3 (7 bytes) before part 2: too small and not last.
	small := must[*metaapi.Upload](t)(c.s.CreateUpload(&metaapi.CreateUpload{Bucket: "bkt", Key: "obj"}))
	for n := uint32(1); n <= 2; n++ {
		a := must[*metaapi.AllocateResponse](t)(c.s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: "obj"}))
		must[*metaapi.Part](t)(c.s.CommitPart(&metaapi.CommitPart{UploadRef: small.UploadRef, Number: n, Size: 3, Blocks: []metaapi.KeyBlock{{BlockRef: a.Block, Length: 3}}, ETag: etag(n)}))
	}
	_, err := c.s.CompleteUpload(&metaapi.CompleteUpload{UploadRef: small.UploadRef, Parts: []metaapi.CompletePart{{Number: 1, ETag: etag(1)}, {Number: 2, ETag: etag(2)}}})
	wantErr(t, err, namespace.ErrPartTooSmall, "a 3-byte first part")
	mustNo(t, c.s.AbortUpload(small.UploadRef))
	if _, err := c.s.GetKey("bkt", "obj"); err == nil {
		t.Fatal("refused completions made a key")
	}

	deletesBefore := c.s.NDeletes
	ki := must[*metaapi.KeyInfo](t)(c.s.CompleteUpload(&metaapi.CompleteUpload{UploadRef: ref,
		Parts: []metaapi.CompletePart{{Number: 1, ETag: etag(1)}, {Number: 3, ETag: `"` + etag(3) + `"`}}}))
	h := md5.New()
	for _, n := range []uint32{1, 3} {
		raw, _ := hex.DecodeString(etag(n))
		h.Write(raw)
	}
	if want := hex.EncodeToString(h.Sum(nil)) + "-2"; ki.Object == nil || ki.Object.ETag != want || ki.Object.ContentType != "video/mp4" || ki.Object.Parts != 2 {
		t.Fatalf("completed key: %+v, want ETag %s", ki.Object, want)
	}
	if want := crc32c.Combine(crc32c.Combine(0, 1, sizes[1]), 3, sizes[3]); ki.CRC32C != want || ki.Size != sizes[1]+sizes[3] {
		t.Fatalf("completed key: %d bytes CRC32C %08x, want %d bytes %08x", ki.Size, ki.CRC32C, sizes[1]+sizes[3], want)
	}
	if len(ki.Blocks) != 2 || ki.Blocks[0].BlockRef != parts[1].BlockRef || ki.Blocks[1].BlockRef != parts[3].BlockRef {
		t.Fatalf("completed key's blocks %+v", ki.Blocks)
	}
	if c.s.Deletes[parts[2].Container][parts[2].Local] == nil || c.s.NDeletes != deletesBefore+1 {
		t.Fatalf("the unlisted part's block is not scheduled for deletion (%d → %d deletions)", deletesBefore, c.s.NDeletes)
	}
	_, err = c.s.GetUpload(ref)
	wantErr(t, err, metaapi.ErrNotFound, "the upload after completion")
	ul := must[*metaapi.UploadList](t)(c.s.ListUploads(&metaapi.ListUploads{Bucket: "bkt"}))
	if len(ul.Uploads) != 0 {
		t.Fatalf("uploads left: %+v", ul.Uploads)
	}
}

// TestDeleteBucketAbortsUploads: deleting a bucket without keys aborts its
// multipart uploads in progress, as S3 does (their parts' blocks are
// scheduled for deletion, their records gone, a bucket of the same name
// starts empty); a bucket with a key is still refused.
func TestDeleteBucketAbortsUploads(t *testing.T) {
	c := threeNodes(t, nil)
	up := must[*metaapi.Upload](t)(c.s.CreateUpload(&metaapi.CreateUpload{Bucket: "bkt", Key: "obj"}))
	a := must[*metaapi.AllocateResponse](t)(c.s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: "obj"}))
	must[*metaapi.Part](t)(c.s.CommitPart(&metaapi.CommitPart{UploadRef: up.UploadRef, Number: 1, Size: 3,
		Blocks: []metaapi.KeyBlock{{BlockRef: a.Block, Pipeline: a.Pipeline.ID, Length: 3}}, ETag: "e"}))
	deletesBefore := c.s.NDeletes
	mustNo(t, c.s.DeleteBucket("bkt"))
	if c.s.Deletes[a.Block.Container][a.Block.Local] == nil || c.s.NDeletes != deletesBefore+1 {
		t.Fatalf("the aborted upload's block is not scheduled for deletion (%d → %d deletions)", deletesBefore, c.s.NDeletes)
	}
	mustNo(t, ignore(c.s.CreateBucket("bkt")))
	_, err := c.s.GetUpload(up.UploadRef)
	wantErr(t, err, metaapi.ErrNotFound, "an upload of the deleted bucket")
	if ul := must[*metaapi.UploadList](t)(c.s.ListUploads(&metaapi.ListUploads{Bucket: "bkt"})); len(ul.Uploads) != 0 {
		t.Fatalf("the new bucket lists the old one's uploads: %+v", ul.Uploads)
	}
}

// TestUsersAndBucketOwners: users are unique by name and access key and
// survive a reopen; an S3 bucket keeps its owner and ACL.
func TestUsersAndBucketOwners(t *testing.T) {
	c := threeNodes(t, nil)
	u := must[*metaapi.User](t)(c.s.CreateUser(&metaapi.CreateUser{Name: "alice"}))
	if len(u.AccessKey) != 20 || len(u.SecretKey) != 40 {
		t.Fatalf("generated keys %q %q", u.AccessKey, u.SecretKey)
	}
	_, err := c.s.CreateUser(&metaapi.CreateUser{Name: "alice"})
	wantErr(t, err, metaapi.ErrExists, "the same name")
	_, err = c.s.CreateUser(&metaapi.CreateUser{Name: "bob", AccessKey: u.AccessKey, SecretKey: "0123456789abcdef0"})
	wantErr(t, err, metaapi.ErrExists, "the same access key")
	_, err = c.s.CreateUser(&metaapi.CreateUser{Name: "bob", AccessKey: "ab", SecretKey: "0123456789abcdef0"})
	wantErr(t, err, metaapi.ErrInvalid, "a short access key")
	must[*metaapi.Bucket](t)(c.s.CreateS3Bucket("owned", &s3permapi.CreateBucket{CreateS3Bucket: metaapi.CreateS3Bucket{Owner: u.AccessKey, ACL: []byte(`{"Owner":"x"}`)}}))
	cfg := c.s.Cfg
	mustNo(t, c.s.Close())
	c.s = open(t, cfg)
	got := must[*metaapi.User](t)(c.s.UserByAccessKey(u.AccessKey))
	if got.Name != "alice" || got.SecretKey != u.SecretKey {
		t.Fatalf("after reopen: %+v", got)
	}
	b := must[*metaapi.Bucket](t)(c.s.GetBucket("owned"))
	if b.Owner != u.AccessKey || string(b.ACL) != `{"Owner":"x"}` {
		t.Fatalf("bucket after reopen: %+v", b)
	}
	mustNo(t, c.s.DeleteUser("alice"))
	_, err = c.s.UserByAccessKey(u.AccessKey)
	wantErr(t, err, metaapi.ErrNotFound, "a deleted user's key")
}
