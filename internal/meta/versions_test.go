package meta

import (
	"slices"
	"testing"

	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/meta/namespace"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/versionapi"
)

// listAll lists every version of bucket, limit a page.
func listAll(t *testing.T, s namespace.Versions, bucket string, limit int) []versionapi.Version {
	t.Helper()
	var out []versionapi.Version
	o := versionapi.ListOptions{Limit: limit}
	for range 10000 {
		l := must[*versionapi.List](t)(s.ListVersions(bucket, o))
		out = append(out, l.Versions...)
		if !l.Truncated {
			return out
		}
		o.KeyMarker, o.VersionIDMarker = l.NextKeyMarker, l.NextVersionIDMarker
	}
	t.Fatal("listing does not end")
	return nil
}

func versionIDs(vs []versionapi.Version) []string {
	var ids []string
	for _, v := range vs {
		s := v.Key + "@" + v.VersionID
		if v.DeleteMarker {
			s += "(marker)"
		}
		if v.IsLatest {
			s += "*"
		}
		ids = append(ids, s)
	}
	return ids
}

// TestVersionsStore walks S3 versioning in the store: a key written
// before versioning keeps its null version; every write of an Enabled
// bucket makes a version, and no block is deleted until its version is;
// a delete makes a marker; deleting versions by ID brings the next newest
// back; Suspended writes replace the null version; listings page by key
// and version markers; everything survives a restart.
func TestVersionsStore(t *testing.T) {
	c := threeNodes(t, nil)
	s := vs(c.s)
	legacy := c.put("bkt", "a", 1, 10)
	if legacy.VersionID != "" {
		t.Fatalf("a never versioned bucket's key has version ID %q", legacy.VersionID)
	}
	mustNo(t, s.SetVersioning("bkt", versionapi.Enabled))
	if st := must[string](t)(s.Versioning("bkt")); st != versionapi.Enabled {
		t.Fatalf("versioning %q", st)
	}
	gc := s.NDeletes
	v1 := c.put("bkt", "a", 2, 10)
	v2 := c.put("bkt", "a", 1, 20)
	b1 := c.put("bkt", "b", 1, 5)
	if v1.VersionID == "" || v1.VersionID == "null" || v2.VersionID <= v1.VersionID {
		t.Fatalf("version IDs %q then %q: want growing, not null", v1.VersionID, v2.VersionID)
	}
	if s.NDeletes != gc {
		t.Fatalf("%d pending deletions after versioned overwrites, want %d (no block deleted)", s.NDeletes, gc)
	}
	// Equal bytes put twice are two versions (a retry is known by its
	// commit ID); the retry itself is answered with its version.
	same := func(id string) *metaapi.KeyInfo {
		v := []byte("same bytes")
		return must[*metaapi.KeyInfo](t)(s.CommitKey("bkt", "same", &metaapi.CommitKey{Size: uint64(len(v)), CRC32C: crc32c.Checksum(v), Inline: v, CommitID: id}))
	}
	p1, p2, p1again := same("commit-1"), same("commit-2"), same("commit-1")
	if p1.VersionID == p2.VersionID || p1again.VersionID != p1.VersionID {
		t.Fatalf("equal puts: versions %q and %q, the first retried %q", p1.VersionID, p2.VersionID, p1again.VersionID)
	}
	mustNo(t, ignore(s.DeleteVersion(versionapi.Ref{Bucket: "bkt", Key: "same", VersionID: p1.VersionID})))
	mustNo(t, ignore(s.DeleteVersion(versionapi.Ref{Bucket: "bkt", Key: "same", VersionID: p2.VersionID})))
	if cur := must[*metaapi.KeyInfo](t)(s.GetKey("bkt", "a")); cur.VersionID != v2.VersionID || cur.Size != 20 {
		t.Fatalf("current version %q of %d bytes, want %q", cur.VersionID, cur.Size, v2.VersionID)
	}
	old := must[*versionapi.Version](t)(s.GetVersion(versionapi.Ref{Bucket: "bkt", Key: "a", VersionID: v1.VersionID}))
	if old.Size != 20 || len(old.Blocks) != 2 || old.Blocks[0].BlockRef != v1.Blocks[0].BlockRef || old.IsLatest {
		t.Fatalf("version 1: %+v", old)
	}
	null := must[*versionapi.Version](t)(s.GetVersion(versionapi.Ref{Bucket: "bkt", Key: "a", VersionID: "null"}))
	if null.Blocks[0].BlockRef != legacy.Blocks[0].BlockRef {
		t.Fatalf("null version %+v, want the key written before versioning", null)
	}
	want := []string{"a@" + v2.VersionID + "*", "a@" + v1.VersionID, "a@null", "b@" + b1.VersionID + "*"}
	if got := versionIDs(listAll(t, s, "bkt", 0)); !slices.Equal(got, want) {
		t.Fatalf("versions %v, want %v", got, want)
	}

	// A delete makes a marker: the key is gone from gets and listings,
	// its versions stay, the bucket is not empty.
	d := must[*versionapi.Deleted](t)(s.DeleteVersion(versionapi.Ref{Bucket: "bkt", Key: "a"}))
	if !d.DeleteMarker || d.VersionID <= v2.VersionID {
		t.Fatalf("delete: %+v", d)
	}
	_, err := s.GetKey("bkt", "a")
	wantErr(t, err, metaapi.ErrNoSuchKey, "get after the delete marker")
	if l := must[*metaapi.KeyList](t)(s.List("bkt", namespace.ListOptions{})); len(l.Keys) != 1 || l.Keys[0].Key != "b" {
		t.Fatalf("keys after the delete marker: %+v", l.Keys)
	}
	mustNo(t, s.DeleteKey("bkt", "b")) // the native delete: a marker too
	wantErr(t, s.DeleteBucket("bkt"), metaapi.ErrNotEmpty, "delete a bucket holding only versions")
	want = []string{"a@" + d.VersionID + "(marker)*", "a@" + v2.VersionID, "a@" + v1.VersionID, "a@null"}
	all := listAll(t, s, "bkt", 0)
	if got := versionIDs(all[:4]); !slices.Equal(got, want) {
		t.Fatalf("versions %v, want %v", got, want)
	}
	for _, limit := range []int{1, 2, 3} { // every page boundary, the markers' included
		if got := listAll(t, s, "bkt", limit); !slices.Equal(versionIDs(got), versionIDs(all)) {
			t.Fatalf("pages of %d: %v, want %v", limit, versionIDs(got), versionIDs(all))
		}
	}
	if s.NDeletes != gc {
		t.Fatalf("%d pending deletions after delete markers, want %d", s.NDeletes, gc)
	}

	// Deleting the marker brings v2 back; deleting v2 (current) brings v1
	// and deletes v2's block, and only it.
	mustNo(t, ignore(s.DeleteVersion(versionapi.Ref{Bucket: "bkt", Key: "a", VersionID: d.VersionID})))
	if cur := must[*metaapi.KeyInfo](t)(s.GetKey("bkt", "a")); cur.VersionID != v2.VersionID {
		t.Fatalf("current %q after the marker's removal, want %q", cur.VersionID, v2.VersionID)
	}
	mustNo(t, ignore(s.DeleteVersion(versionapi.Ref{Bucket: "bkt", Key: "a", VersionID: v2.VersionID})))
	if cur := must[*metaapi.KeyInfo](t)(s.GetKey("bkt", "a")); cur.VersionID != v1.VersionID {
		t.Fatalf("current %q after v2's removal, want %q", cur.VersionID, v1.VersionID)
	}
	if s.NDeletes != gc+1 {
		t.Fatalf("%d pending deletions after removing a version of one block, want %d", s.NDeletes, gc+1)
	}
	_, err = s.GetVersion(versionapi.Ref{Bucket: "bkt", Key: "a", VersionID: v2.VersionID})
	wantErr(t, err, metaapi.ErrNotFound, "get a removed version")
	_, err = s.GetVersion(versionapi.Ref{Bucket: "bkt", Key: "a", VersionID: "bad_id"})
	wantErr(t, err, metaapi.ErrInvalid, "a malformed version ID")
	_, err = s.GetVersion(versionapi.Ref{Bucket: "bkt", Key: "a", VersionID: "01G65Z755AFWAKHE12NY0CQ9FH"})
	wantErr(t, err, metaapi.ErrNotFound, "another server's version ID")

	// Suspended: a write replaces the null version (the legacy one's
	// block goes), keeps v1 as a noncurrent version.
	mustNo(t, s.SetVersioning("bkt", versionapi.Suspended))
	n1 := c.put("bkt", "a", 1, 7)
	if n1.VersionID != "null" || s.NDeletes != gc+2 {
		t.Fatalf("suspended write: version %q, %d pending deletions; want null, %d", n1.VersionID, s.NDeletes, gc+2)
	}
	n2 := c.put("bkt", "a", 1, 8)
	if n2.VersionID != "null" || s.NDeletes != gc+3 {
		t.Fatalf("second suspended write: version %q, %d pending deletions; want null, %d", n2.VersionID, s.NDeletes, gc+3)
	}
	want = []string{"a@null*", "a@" + v1.VersionID}
	if got := versionIDs(listAll(t, s, "bkt", 0))[:2]; !slices.Equal(got, want) {
		t.Fatalf("versions %v, want %v", got, want)
	}
	if bk := bucketOf(t, s, "bkt"); bk.Keys != 1 || bk.Bytes != 8+20+5 {
		t.Fatalf("bucket counts %d keys, %d bytes; want 1, 33", bk.Keys, bk.Bytes)
	}

	// After a restart everything reads the same.
	before := versionIDs(listAll(t, s, "bkt", 0))
	cfg := s.Cfg
	mustClose(t, c.s)
	s2 := vs(open(t, cfg))
	if got := versionIDs(listAll(t, s2, "bkt", 0)); !slices.Equal(got, before) {
		t.Fatalf("after a restart %v, want %v", got, before)
	}
	if st := must[string](t)(s2.Versioning("bkt")); st != versionapi.Suspended {
		t.Fatalf("versioning %q after a restart", st)
	}

	// Emptied of every version, the bucket goes.
	for _, v := range listAll(t, s2, "bkt", 0) {
		mustNo(t, ignore(s2.DeleteVersion(versionapi.Ref{Bucket: v.Bucket, Key: v.Key, VersionID: v.VersionID})))
	}
	mustNo(t, s2.DeleteBucket("bkt"))
}

func vs(s *Service) namespace.Versions { return namespace.Versions{Namespace: s.Namespace} }

func bucketOf(t *testing.T, s namespace.Versions, name string) metaapi.Bucket {
	t.Helper()
	for _, b := range must[*metaapi.BucketList](t)(s.ListBuckets()).Buckets {
		if b.Name == name {
			return b
		}
	}
	t.Fatalf("no bucket %s", name)
	return metaapi.Bucket{}
}
