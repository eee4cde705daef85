package meta

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/lifecycle"
	"github.com/spindle-store/spindle/internal/meta/lockmeta"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/s3meta"
	"github.com/spindle-store/spindle/internal/metaapi/versionapi"
)

// TestLifecycleAppliesOnlyAsPlanned: an expiry planned for a key that is
// written again before it applies does nothing (the new object stays);
// planned again once due, it deletes the key and hands its blocks to the
// block GC; an expired delete marker is removed only while it is its
// key's only version; a lifecycle document that does not parse is refused
// by the meta service.
func TestLifecycleAppliesOnlyAsPlanned(t *testing.T) {
	c := threeNodes(t, nil)
	ns := vs(c.s)
	conf, err := lifecycle.Parse([]byte(`<LifecycleConfiguration><Rule><ID>e</ID><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>` +
		`<Rule><ID>m</ID><Status>Enabled</Status><Expiration><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration></Rule></LifecycleConfiguration>`))
	mustNo(t, err)
	plan := func(bucket string) []lifecycle.Action {
		t.Helper()
		keys, done, err := ns.ScanLifecycle(bucket, "", 100)
		mustNo(t, err)
		if !done {
			t.Fatal("a page of 100 did not reach the end")
		}
		var acts []lifecycle.Action
		for _, kv := range keys {
			if a := conf.Plan(kv, c.clk.Now(), time.Second); !a.Empty() { // a day of 1 s: the datanodes stay HEALTHY
				acts = append(acts, a)
			}
		}
		return acts
	}
	c.put("bkt", "a", 1, 100)
	c.clk.Advance(2 * time.Second)
	acts := plan("bkt")
	if len(acts) != 1 || !acts[0].ExpireCurrent {
		t.Fatalf("plan %+v", acts)
	}
	c.put("bkt", "a", 1, 200) // written again before the expiry applies
	got := must[lifecycle.Counts](t)(ns.ApplyLifecycle("bkt", acts, nil))
	if got != (lifecycle.Counts{}) {
		t.Fatalf("an expiry planned for the old object applied to the new one: %+v", got)
	}
	if ki := must[*metaapi.KeyInfo](t)(c.s.GetKey("bkt", "a")); ki.Size != 200 {
		t.Fatalf("key after the stale expiry: %+v", ki)
	}
	c.clk.Advance(2 * time.Second)
	before := c.s.NDeletes
	got = must[lifecycle.Counts](t)(ns.ApplyLifecycle("bkt", plan("bkt"), nil))
	if got != (lifecycle.Counts{Expired: 1, BytesFreed: 200}) {
		t.Fatalf("expiry once due: %+v", got)
	}
	if _, err := c.s.GetKey("bkt", "a"); err == nil {
		t.Fatal("the expired key is still there")
	}
	if c.s.NDeletes <= before {
		t.Fatal("the expired key's block was not scheduled for deletion")
	}
	// versioned: the marker goes only once it is alone
	mustNo(t, ignore(c.s.CreateBucket("vers")))
	mustNo(t, ns.SetVersioning("vers", versionapi.Enabled))
	v := c.put("vers", "k", 1, 100)
	mustNo(t, ignore(ns.DeleteVersion(versionapi.Ref{Bucket: "vers", Key: "k"})))
	if acts := plan("vers"); len(acts) != 0 {
		t.Fatalf("a marker over a version: %+v", acts)
	}
	mustNo(t, ignore(ns.DeleteVersion(versionapi.Ref{Bucket: "vers", Key: "k", VersionID: v.VersionID})))
	got = must[lifecycle.Counts](t)(ns.ApplyLifecycle("vers", plan("vers"), nil))
	if got != (lifecycle.Counts{MarkersRemoved: 1}) || len(listAll(t, ns, "vers", 10)) != 0 {
		t.Fatalf("marker alone: %+v", got)
	}
	// the runner's metrics are exported with the service's
	c.s.Handler()
	mfs, err := c.s.Metrics.Reg.Gather()
	mustNo(t, err)
	found := 0
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "spindle_lifecycle_") {
			found++
		}
	}
	if found != 10 {
		t.Fatalf("%d spindle_lifecycle_* metrics, want 10", found)
	}
	err = c.s.PutBucketConf("bkt", s3meta.ConfLifecycle, []byte(`<LifecycleConfiguration><Rule><Status>On</Status></Rule></LifecycleConfiguration>`))
	wantErr(t, err, metaapi.ErrInvalid, "a lifecycle document that does not parse")
	mustNo(t, c.s.PutBucketConf("bkt", s3meta.ConfLifecycle, conf.XML()))
}

// TestLifecycleLeavesLockedVersions: a noncurrent version that object lock
// holds (a legal hold) is left alone by a due expiry and counted as Locked,
// while the unlocked one beside it in the same page is removed; once the
// hold is off, the next run removes it. It fails with expireVersion's lock
// check removed (forget refuses the locked version and the whole page's
// batch fails).
func TestLifecycleLeavesLockedVersions(t *testing.T) {
	c := threeNodes(t, nil)
	ns := vs(c.s)
	mustNo(t, ignore(c.s.CreateBucket("lkb")))
	mustNo(t, ns.SetVersioning("lkb", versionapi.Enabled))
	mustNo(t, ns.PutLockConfig("lkb", lockmeta.Config{Enabled: true}, false))
	conf, err := lifecycle.Parse([]byte(`<LifecycleConfiguration><Rule><ID>n</ID><Status>Enabled</Status><Filter></Filter>` +
		`<NoncurrentVersionExpiration><NoncurrentDays>1</NoncurrentDays></NoncurrentVersionExpiration></Rule></LifecycleConfiguration>`))
	mustNo(t, err)
	run := func() lifecycle.Counts {
		t.Helper()
		keys, _, err := ns.ScanLifecycle("lkb", "", 100)
		mustNo(t, err)
		var acts []lifecycle.Action
		for _, kv := range keys {
			if a := conf.Plan(kv, c.clk.Now(), time.Second); !a.Empty() {
				acts = append(acts, a)
			}
		}
		return must[lifecycle.Counts](t)(ns.ApplyLifecycle("lkb", acts, nil))
	}
	n := 0
	put := func(key string, h map[string]string) string {
		t.Helper()
		n++
		ck := inlineCommit(fmt.Appendf(nil, "v%d", n)) // (an identical one would be taken for a retry)
		ck.Object = &metaapi.ObjectMeta{ETag: "e", Headers: h}
		return must[*metaapi.KeyInfo](t)(c.s.CommitKey("lkb", key, ck)).VersionID
	}
	held := put("held", map[string]string{versionapi.HoldHeader: "ON"})
	put("held", nil) // the held version becomes noncurrent
	put("free", nil)
	put("free", nil)
	c.clk.Advance(3 * time.Second)
	if got := run(); got.Noncurrent != 1 || got.Locked != 1 {
		t.Fatalf("run with a held noncurrent version: %+v, want 1 removed and 1 kept by the lock", got)
	}
	if _, err := ns.GetLock(versionapi.Ref{Bucket: "lkb", Key: "held", VersionID: held}); err != nil {
		t.Fatalf("the held version after the run: %v", err)
	}
	mustNo(t, ns.SetLock(versionapi.Ref{Bucket: "lkb", Key: "held", VersionID: held}, func(l lockmeta.Lock) (lockmeta.Lock, error) {
		l.Hold = false
		return l, nil
	}))
	if got := run(); got.Noncurrent != 1 || got.Locked != 0 {
		t.Fatalf("run once the hold is off: %+v, want the version removed", got)
	}
}
