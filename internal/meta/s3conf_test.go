package meta

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/s3meta"
	"github.com/spindle-store/spindle/internal/metaapi/versionapi"
)

// TestBucketConfAndObjectTags: a bucket's configuration documents and an
// object's tag set are stored, survive a reopen, and go with the bucket
// (documents) or the key's next version (tags); tagging a key leaves its
// bytes and ETag alone.
func TestBucketConfAndObjectTags(t *testing.T) {
	c := threeNodes(t, nil)
	s := c.s
	if doc := must[[]byte](t)(s.GetBucketConf("bkt", s3meta.ConfCORS)); doc != nil {
		t.Fatalf("unset CORS: %q", doc)
	}
	mustNo(t, s.PutBucketConf("bkt", s3meta.ConfCORS, []byte("<CORSConfiguration/>")))
	mustNo(t, s.PutBucketConf("bkt", s3meta.ConfTagging, []byte("a=1&b=2")))
	wantErr(t, s.PutBucketConf("bkt", "policy", []byte("x")), metaapi.ErrInvalid, "an unknown document")
	wantErr(t, s.PutBucketConf("nope", s3meta.ConfCORS, []byte("x")), metaapi.ErrNoSuchBucket, "a missing bucket")
	_, err := s.GetBucketConf("nope", s3meta.ConfCORS)
	wantErr(t, err, metaapi.ErrNoSuchBucket, "read of a missing bucket")

	commit := func(key, etag string, cond metaapi.Conditions) (*metaapi.KeyInfo, error) {
		a := must[*metaapi.AllocateResponse](t)(s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: key}))
		om := &metaapi.ObjectMeta{ETag: etag, Headers: map[string]string{s3meta.TaggingHeader: "t=1"}}
		return s.CommitKey("bkt", key, &metaapi.CommitKey{Size: 10, CRC32C: 1, Blocks: []metaapi.KeyBlock{{BlockRef: a.Block, Length: 10}}, Object: om, Conditions: cond})
	}
	must[*metaapi.KeyInfo](t)(commit("k", "e1", metaapi.Conditions{}))
	mustNo(t, s.PutObjectTagging(&s3meta.ObjectTagging{Bucket: "bkt", Key: "k", Tagging: "x=y&z="}))
	wantErr(t, s.PutObjectTagging(&s3meta.ObjectTagging{Bucket: "bkt", Key: "missing", Tagging: "x=y"}), metaapi.ErrNoSuchKey, "tagging a missing key")

	cfg := s.Cfg
	mustNo(t, s.Close())
	c.s = open(t, cfg)
	s = c.s
	if doc := string(must[[]byte](t)(s.GetBucketConf("bkt", s3meta.ConfCORS))); doc != "<CORSConfiguration/>" {
		t.Fatalf("CORS after reopen: %q", doc)
	}
	ki := must[*metaapi.KeyInfo](t)(s.GetKey("bkt", "k"))
	if ki.Object.Headers[s3meta.TaggingHeader] != "x=y&z=" || ki.Object.ETag != "e1" || ki.Size != 10 {
		t.Fatalf("tagged key after reopen: %+v %+v", ki, ki.Object)
	}
	mustNo(t, s.PutObjectTagging(&s3meta.ObjectTagging{Bucket: "bkt", Key: "k"}))
	ki = must[*metaapi.KeyInfo](t)(s.GetKey("bkt", "k"))
	if _, ok := ki.Object.Headers[s3meta.TaggingHeader]; ok {
		t.Fatalf("tags deleted, still %+v", ki.Object.Headers)
	}

	// the bucket's documents go with it: a bucket of the same name
	// created again has none
	mustNo(t, s.DeleteKey("bkt", "k"))
	mustNo(t, s.DeleteBucket("bkt"))
	mustNo(t, ignore(s.CreateBucket("bkt")))
	for _, name := range s3meta.BucketConfNames {
		if doc := must[[]byte](t)(s.GetBucketConf("bkt", name)); doc != nil {
			t.Fatalf("%s of a bucket created again: %q", name, doc)
		}
	}
}

// TestVersionTags: a tag change by version ID rewrites that version's
// record alone, current or noncurrent (S3's versionId of
// Put/DeleteObjectTagging), and survives a reopen; a version the key does
// not have is NOT_FOUND, a delete marker INVALID.
func TestVersionTags(t *testing.T) {
	c := threeNodes(t, nil)
	mustNo(t, vs(c.s).SetVersioning("bkt", versionapi.Enabled))
	v1, v2 := c.put("bkt", "k", 1, 10), c.put("bkt", "k", 1, 20)
	tag := func(vid, tagging string) error {
		return c.s.PutObjectTagging(&s3meta.ObjectTagging{Bucket: "bkt", Key: "k", Tagging: tagging, VersionID: vid})
	}
	tags := func(vid string) string {
		v := must[*versionapi.Version](t)(vs(c.s).GetVersion(versionapi.Ref{Bucket: "bkt", Key: "k", VersionID: vid}))
		if v.Object == nil {
			return ""
		}
		return v.Object.Headers[s3meta.TaggingHeader]
	}
	mustNo(t, tag(v1.VersionID, "old=1"))
	mustNo(t, tag(v2.VersionID, "cur=2"))
	cfg := c.s.Cfg
	mustNo(t, c.s.Close())
	c.s = open(t, cfg)
	if a, b := tags(v1.VersionID), tags(v2.VersionID); a != "old=1" || b != "cur=2" {
		t.Fatalf("tags after reopen: older %q, current %q", a, b)
	}
	if ki := must[*metaapi.KeyInfo](t)(c.s.GetKey("bkt", "k")); ki.VersionID != v2.VersionID || ki.Size != 20 {
		t.Fatalf("current version after tagging the older one: %+v", ki)
	}
	mustNo(t, tag(v1.VersionID, ""))
	if a, b := tags(v1.VersionID), tags(v2.VersionID); a != "" || b != "cur=2" {
		t.Fatalf("tags after the older one's delete: older %q, current %q", a, b)
	}
	wantErr(t, tag("0000000000000001", "x=y"), metaapi.ErrNotFound, "tagging a version the key does not have")
	d := must[*versionapi.Deleted](t)(vs(c.s).DeleteVersion(versionapi.Ref{Bucket: "bkt", Key: "k"}))
	wantErr(t, tag(d.VersionID, "x=y"), metaapi.ErrInvalid, "tagging a delete marker")
}

// TestConditionalCommitRace: writers racing with If-None-Match * on one
// key — exactly one commits, every other is refused with ErrPrecondition;
// If-Match on a missing key is ErrNoSuchKey (as S3).
func TestConditionalCommitRace(t *testing.T) {
	c := threeNodes(t, nil)
	s := c.s
	const writers = 8
	cks := make([]*metaapi.CommitKey, writers)
	for i := range cks {
		a := must[*metaapi.AllocateResponse](t)(s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: "race"}))
		cks[i] = &metaapi.CommitKey{Size: 10, CRC32C: 1, Blocks: []metaapi.KeyBlock{{BlockRef: a.Block, Length: 10}},
			Object: &metaapi.ObjectMeta{ETag: "e"}, Conditions: metaapi.Conditions{IfNoneMatch: "*"}}
	}
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for i := range cks {
		wg.Go(func() { _, errs[i] = s.CommitKey("bkt", "race", cks[i]) })
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, metaapi.ErrPrecondition):
			t.Fatalf("writer %d: %v, want a precondition failure", i, err)
		}
	}
	if won != 1 {
		t.Fatalf("%d writers won, want exactly 1 (%v)", won, errs)
	}
	a := must[*metaapi.AllocateResponse](t)(s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: "absent"}))
	_, err := s.CommitKey("bkt", "absent", &metaapi.CommitKey{Size: 10, CRC32C: 1, Blocks: []metaapi.KeyBlock{{BlockRef: a.Block, Length: 10}},
		Conditions: metaapi.Conditions{IfMatch: `"e"`}})
	wantErr(t, err, metaapi.ErrNoSuchKey, "If-Match on a missing key")
}

// TestReplicatedS3Conf: a bucket's CORS document and an object's tags are
// replicated meta state: after the leader that took them stops, the new
// leader answers them.
func TestReplicatedS3Conf(t *testing.T) {
	g := newRGroup(t, 3)
	g.dns()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := g.cl.CreateBucket(ctx, "bkt"); err != nil {
		t.Fatal(err)
	}
	mustNo(t, put(ctx, g.cl, "bkt", "k", 10))
	mustNo(t, s3meta.PutBucketConf(ctx, g.cl, "bkt", s3meta.ConfCORS, []byte("<CORSConfiguration>rules</CORSConfiguration>")))
	mustNo(t, s3meta.PutObjectTagging(ctx, g.cl, "bkt", "k", "team=storage"))
	g.stop(g.leader())
	doc, err := s3meta.GetBucketConf(ctx, g.cl, "bkt", s3meta.ConfCORS)
	if err != nil || string(doc) != "<CORSConfiguration>rules</CORSConfiguration>" {
		t.Fatalf("CORS after the leader stopped: %q, %v", doc, err)
	}
	ki, err := g.cl.GetKey(ctx, "bkt", "k")
	if err != nil || ki.Object == nil || ki.Object.Headers[s3meta.TaggingHeader] != "team=storage" {
		t.Fatalf("tags after the leader stopped: %+v, %v", ki.Object, err)
	}
}
