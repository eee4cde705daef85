package meta

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/metaapi"
	api "github.com/spindle-store/spindle/internal/metaapi/authz"
	"github.com/spindle-store/spindle/internal/metaapi/versionapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// TestObjectLockThroughMetaAPI: object lock as the meta service decides it
// (package lockmeta), over its API with certificates: a client holding
// read, write and delete grants may write and read versions of a bucket
// with object lock, but neither change a lock nor bypass a GOVERNANCE
// retention (admin right); the admin certificate bypasses GOVERNANCE only
// when it asks, never COMPLIANCE nor a legal hold; a delete without a
// version ID still makes a delete marker; versioning cannot be suspended;
// a bucket without lock takes no lock headers. Fails with forget's
// lockmeta.CheckRemoveMeta removed (the deletes go through).
func TestObjectLockThroughMetaAPI(t *testing.T) {
	pki := newTestPKI(t)
	srv, _ := serveTLS(t, pki)
	ctx := context.Background()
	admin := clientAs(t, srv, pki.settings("root", tlsconf.RoleAdmin))
	bob := clientAs(t, srv, pki.settings("bob", tlsconf.RoleClient))
	must[metaapi.Bucket](t)(admin.CreateBucket(ctx, "lkb"))
	must[metaapi.Bucket](t)(admin.CreateBucket(ctx, "plain"))
	if err := versionapi.PutLockConfig(ctx, admin, "plain", versionapi.LockConfig{Enabled: true}); !errors.Is(err, metaapi.ErrPrecondition) {
		t.Fatalf("object lock on a bucket never versioned: %v, want a precondition refusal", err)
	}
	if err := versionapi.PutLockConfig(ctx, admin, "lkb", versionapi.LockConfig{Enabled: true, Create: true}); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{api.Read, api.Write, api.Delete} {
		if err := api.Add(ctx, admin, api.GrantChange{Principal: api.CertPrefix + "bob", Bucket: "lkb", Action: a}); err != nil {
			t.Fatal(err)
		}
	}
	if err := versionapi.SetState(ctx, admin, "lkb", versionapi.Suspended); !errors.Is(err, metaapi.ErrPrecondition) {
		t.Errorf("suspending versioning of a bucket with object lock: %v", err)
	}
	put := func(c *metaapi.Client, bucket, key string, h map[string]string) (string, error) {
		ck := inlineCommit([]byte("v"))
		ck.Object = &metaapi.ObjectMeta{ETag: "e", Headers: h}
		ki, err := c.CommitKey(ctx, bucket, key, *ck)
		return ki.VersionID, err
	}
	until := time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)
	if _, err := put(admin, "plain", "k", map[string]string{versionapi.ModeHeader: versionapi.Compliance, versionapi.UntilHeader: until}); !errors.Is(err, metaapi.ErrInvalid) {
		t.Errorf("a lock on a key of a bucket without object lock: %v, want invalid", err)
	}
	gov := must[string](t)(put(bob, "lkb", "g", map[string]string{versionapi.ModeHeader: versionapi.Governance, versionapi.UntilHeader: until}))
	comp := must[string](t)(put(bob, "lkb", "c", map[string]string{versionapi.ModeHeader: versionapi.Compliance, versionapi.UntilHeader: until}))
	held := must[string](t)(put(bob, "lkb", "h", map[string]string{versionapi.HoldHeader: "ON"}))
	free := must[string](t)(put(bob, "lkb", "f", nil))
	ref := func(key, vid string, bypass bool) versionapi.Ref {
		return versionapi.Ref{Bucket: "lkb", Key: key, VersionID: vid, Bypass: bypass}
	}
	if l, err := versionapi.GetLock(ctx, bob, ref("g", gov, false)); err != nil || l.Mode != versionapi.Governance {
		t.Errorf("lock of the GOVERNANCE version: %+v, %v", l, err)
	}
	refused := func(who string, c *metaapi.Client, r versionapi.Ref) {
		t.Helper()
		if _, err := versionapi.Delete(ctx, c, r); !errors.Is(err, metaapi.ErrForbidden) {
			t.Errorf("%s deleting %s version %s (bypass %v): %v, want forbidden", who, r.Key, r.VersionID, r.Bypass, err)
		}
	}
	refused("bob", bob, ref("g", gov, false))
	refused("bob", bob, ref("g", gov, true)) // no admin right: no bypass
	refused("admin", admin, ref("g", gov, false))
	refused("admin", admin, ref("c", comp, true))
	refused("admin", admin, ref("h", held, true))
	if err := versionapi.PutRetention(ctx, bob, versionapi.Retention{Ref: ref("g", gov, true), Mode: versionapi.Governance, Until: time.Now().Add(time.Hour)}); !errors.Is(err, metaapi.ErrForbidden) {
		t.Errorf("bob shortening a retention: %v, want forbidden", err)
	}
	if err := versionapi.PutRetention(ctx, admin, versionapi.Retention{Ref: ref("c", comp, true), Mode: versionapi.Compliance, Until: time.Now().Add(time.Hour)}); !errors.Is(err, metaapi.ErrForbidden) {
		t.Errorf("admin shortening a COMPLIANCE retention: %v, want forbidden", err)
	}
	if d, err := versionapi.Delete(ctx, bob, ref("c", "", false)); err != nil || !d.DeleteMarker {
		t.Errorf("delete without a version ID: %+v, %v, want a delete marker", d, err)
	}
	if _, err := versionapi.Delete(ctx, bob, ref("f", free, false)); err != nil {
		t.Errorf("deleting an unlocked version: %v", err)
	}
	if _, err := versionapi.Delete(ctx, admin, ref("g", gov, true)); err != nil {
		t.Errorf("admin bypassing GOVERNANCE: %v", err)
	}
	if err := versionapi.PutLegalHold(ctx, admin, versionapi.LegalHold{Ref: ref("h", held, false), On: false}); err != nil {
		t.Fatal(err)
	}
	if _, err := versionapi.Delete(ctx, bob, ref("h", held, false)); err != nil {
		t.Errorf("deleting a version whose legal hold is off: %v", err)
	}
	if v, err := versionapi.Get(ctx, bob, ref("c", comp, false)); err != nil || string(v.Inline) != "v" {
		t.Errorf("the COMPLIANCE version: %v", err)
	}
}
