package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/versionapi"
	"github.com/spindle-store/spindle/internal/server"
	"github.com/spindle-store/spindle/internal/testutil"
)

// TestLockedVersionsSurviveMetaLeaderKill is issue 35's durability check
// for object lock: spindle server --meta-replicas 3 with 3 datanodes
// (separate processes); a bucket with object lock and a default
// COMPLIANCE retention gets versions of a few keys (inline values and
// values in blocks), one with a legal hold too; the native client (an admin certificate) keeps
// trying to delete them by version ID, with and without the GOVERNANCE
// bypass, and a writer adds locked versions, while the meta leader is
// killed -9 twice, then a datanode once (each restarted 2 s later).
// Then every locked version is still there with its lock (retention
// replicated meta state), reads back with its bytes (its blocks not
// freed), and is still refused a delete. No delete of a locked version was ever acknowledged.
// Skipped with -short (about a minute).
func TestLockedVersionsSurviveMetaLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("a one-minute multi-process run")
	}
	const (
		keys  = 6
		kills = 2
	)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	srv, err := server.Start(ctx, server.Config{Dir: t.TempDir(), Datanodes: 3, MetaReplicas: 3, MetaListen: "127.0.0.1:0",
		Binary: spindleBin, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, srv)
	const bucket = "lockha"
	if _, err := srv.Meta().CreateBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	if err := versionapi.PutLockConfig(ctx, srv.Meta(), bucket, versionapi.LockConfig{Enabled: true, Create: true, Mode: versionapi.Compliance, Days: 1}); err != nil {
		t.Fatal(err)
	}
	if st, err := versionapi.GetState(ctx, srv.Meta(), bucket); err != nil || st != versionapi.Enabled {
		t.Fatalf("versioning of a bucket with object lock: %q, %v", st, err)
	}
	kc, err := keyclient.New(srv.Meta(), keyclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	type version struct {
		ref  versionapi.Ref
		seed int64
	}
	var locked []version
	for i := range keys {
		ref := versionapi.Ref{Bucket: bucket, Key: fmt.Sprintf("k%d", i%3)}
		seed := int64(i) + 7
		res, err := kc.Put(ctx, bucket, ref.Key, bytes.NewReader(versionValue(seed)), keyclient.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ref.VersionID = res.Key.VersionID
		locked = append(locked, version{ref: ref, seed: seed})
	}
	// A COMPLIANCE retention does not turn GOVERNANCE, bypass or not.
	gov := locked[0].ref
	gov.Bypass = true
	if err := versionapi.PutRetention(ctx, srv.Meta(), versionapi.Retention{Ref: gov, Mode: versionapi.Governance, Until: time.Now().Add(24 * time.Hour)}); err == nil {
		t.Fatal("a COMPLIANCE retention turned GOVERNANCE")
	}
	if err := versionapi.PutLegalHold(ctx, srv.Meta(), versionapi.LegalHold{Ref: locked[1].ref, On: true}); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	acked, written := 0, 0
	attempts := 0
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // deleters: every locked version, with and without the bypass, until stopped (bounded)
		defer wg.Done()
		mc, err := metaapi.NewClient(srv.MetaAddr(), metaapi.ClientOptions{TLS: srv.ClientTLS()})
		if err != nil {
			t.Error(err)
			return
		}
		for n := 0; n < 20000; n++ {
			select {
			case <-stop:
				return
			default:
			}
			mu.Lock()
			ref := locked[n%len(locked)].ref
			mu.Unlock()
			ref.Bypass = n%2 == 0
			octx, ocancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := versionapi.Delete(octx, mc, ref)
			ocancel()
			mu.Lock()
			attempts++
			if err == nil {
				acked++
				t.Errorf("delete of locked version %s of %s acknowledged", ref.VersionID, ref.Key)
			}
			mu.Unlock()
			if err != nil && !errors.Is(err, metaapi.ErrForbidden) {
				time.Sleep(20 * time.Millisecond) // a leader change: no busy loop while there is none
			}
		}
	}()
	wg.Add(1)
	go func() { // a writer: new locked versions (the bucket's default retention), until stopped (bounded)
		defer wg.Done()
		for n := 0; n < 20000; n++ {
			select {
			case <-stop:
				return
			default:
			}
			v := version{ref: versionapi.Ref{Bucket: bucket, Key: fmt.Sprintf("k%d", n%3)}, seed: int64(n) + 1000}
			octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
			res, err := kc.Put(octx, bucket, v.ref.Key, bytes.NewReader(versionValue(v.seed)), keyclient.PutOptions{})
			ocancel()
			if err != nil {
				time.Sleep(20 * time.Millisecond) // a leader or datanode change: no busy loop meanwhile
				continue
			}
			v.ref.VersionID = res.Key.VersionID
			mu.Lock()
			locked = append(locked, v)
			written++
			mu.Unlock()
		}
	}()
	leader := func() int {
		for range 200 {
			for i, a := range strings.Split(srv.MetaAddr(), ",") {
				mc, err := metaapi.NewClient(a, metaapi.ClientOptions{Attempts: 1, Timeout: time.Second, TLS: srv.ClientTLS()})
				if err != nil {
					t.Fatal(err)
				}
				if st, err := mc.MetaStatus(ctx); err == nil && st.Serving {
					return i + 1
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatal("no meta leader within 10 s")
		return 0
	}
	tries := func() int { mu.Lock(); defer mu.Unlock(); return attempts }
	waitTries := func(from int) { // bounded: until the deleter made some attempts
		for deadline := time.Now().Add(time.Minute); tries() < from+20 && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
	}
	g := srv.MetaGroup()
	for round := 1; round <= kills; round++ {
		waitTries(tries())
		ld := leader()
		if err := g.Kill(ld); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: leader %d killed -9 after %d delete attempts", round, ld, tries())
		time.Sleep(2 * time.Second)
		if err := g.Restart(ld); err != nil {
			t.Fatal(err)
		}
	}
	waitTries(tries())
	writes := func() int { mu.Lock(); defer mu.Unlock(); return written }
	killDatanode(ctx, t, srv, 1+tries()%3, writes)
	for w, deadline := writes(), time.Now().Add(time.Minute); writes() < w+10 && time.Now().Before(deadline); { // bounded: writes go on
		time.Sleep(50 * time.Millisecond)
	}
	waitTries(tries())
	close(stop)
	wg.Wait()

	mc, err := metaapi.NewClient(srv.MetaAddr(), metaapi.ClientOptions{TLS: srv.ClientTLS()})
	if err != nil {
		t.Fatal(err)
	}
	rkc, err := keyclient.New(mc, keyclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range locked {
		l, err := versionapi.GetLock(ctx, mc, v.ref)
		if err != nil || l.Mode != versionapi.Compliance || !l.Until.After(time.Now()) || l.LegalHold != (i == 1) {
			t.Errorf("lock of version %s of %s after the kills: %+v, %v", v.ref.VersionID, v.ref.Key, l, err)
		}
		got, err := versionapi.Get(ctx, mc, v.ref)
		if err != nil {
			t.Errorf("locked version %s of %s: %v", v.ref.VersionID, v.ref.Key, err)
			continue
		}
		var buf bytes.Buffer
		if err := rkc.ReadKey(ctx, got.KeyInfo, 0, int64(got.Size), &buf, keyclient.GetOptions{}); err != nil || !bytes.Equal(buf.Bytes(), versionValue(v.seed)) {
			t.Errorf("locked version %s of %s: %v (%d bytes)", v.ref.VersionID, v.ref.Key, err, buf.Len())
		}
		for _, bypass := range []bool{false, true} {
			ref := v.ref
			ref.Bypass = bypass
			if _, err := versionapi.Delete(ctx, mc, ref); !errors.Is(err, metaapi.ErrForbidden) {
				t.Errorf("delete of locked version %s of %s (bypass %v) after the kills: %v, want forbidden", ref.VersionID, ref.Key, bypass, err)
			}
		}
	}
	// A delete without a version ID still makes a delete marker (S3).
	if d, err := versionapi.Delete(ctx, mc, versionapi.Ref{Bucket: bucket, Key: "k0"}); err != nil || !d.DeleteMarker {
		t.Errorf("delete without a version ID: %+v, %v", d, err)
	}
	if written == 0 {
		t.Error("no locked version written during the kills")
	}
	t.Logf("object lock HA: %d locked versions written during the kills, %d delete attempts of locked versions, %d acknowledged, %d leader kills, 1 datanode kill",
		written, tries(), acked, kills)
}
