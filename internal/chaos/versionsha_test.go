package chaos

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"os"
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

// TestVersionsSurviveMetaLeaderKill is issue 35's durability check for
// versions: spindle server --meta-replicas 3 with 4 datanodes (separate
// processes); clients write many versions of a few keys of a versioned
// bucket (inline values and values in blocks) and delete some (delete
// markers) while the meta leader is killed -9 twice, then a datanode once
// (each restarted 2 s later). Then every acknowledged version reads back by its version ID
// with its bytes, every acknowledged delete marker is listed, no two
// acknowledged writes got one version ID, and each key's versions are
// listed newest first. Skipped with -short (about a minute).
func TestVersionsSurviveMetaLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("a one-minute multi-process run")
	}
	const (
		clients = 6
		keys    = 5
		kills   = 2
		maxOps  = 20000
	)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	replicas := 3
	if os.Getenv("VERS_SINGLE") != "" {
		replicas = 1
	}
	srv, err := server.Start(ctx, server.Config{Dir: t.TempDir(), Datanodes: 4, MetaReplicas: replicas, MetaListen: "127.0.0.1:0",
		Binary: spindleBin, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, srv)
	const bucket = "versha"
	if _, err := srv.Meta().CreateBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	if err := versionapi.SetState(ctx, srv.Meta(), bucket, versionapi.Enabled); err != nil {
		t.Fatal(err)
	}
	newKC := func() (*keyclient.Client, *metaapi.Client) {
		mc, err := metaapi.NewClient(srv.MetaAddr(), metaapi.ClientOptions{TLS: srv.ClientTLS()})
		if err != nil {
			t.Fatal(err)
		}
		kc, err := keyclient.New(mc, keyclient.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return kc, mc
	}
	type acked struct {
		key    string
		seed   int64 // the value's (-1: a delete marker)
		client int
	}
	var mu sync.Mutex
	versions := map[string]acked{} // key/version ID → what made it (IDs are a key's: two keys may share one)
	dup := 0
	ops := 0
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kc, mc := newKC()
			rng := rand.New(rand.NewSource(int64(c) + 100))
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				ops++
				over := ops > maxOps
				mu.Unlock()
				if over {
					return
				}
				octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
				key := fmt.Sprintf("k%d", rng.Intn(keys))
				rec, vid := acked{key: key, seed: -1, client: c}, ""
				if rng.Intn(8) == 0 {
					d, err := versionapi.Delete(octx, mc, versionapi.Ref{Bucket: bucket, Key: key})
					if err == nil {
						vid = d.VersionID
					}
				} else {
					rec.seed = int64(c)*1_000_000 + int64(n) // distinct below 2^31-1 (math/rand's seeds are taken modulo it)
					res, err := kc.Put(octx, bucket, key, bytes.NewReader(versionValue(rec.seed)), keyclient.PutOptions{})
					if err == nil {
						vid = res.Key.VersionID
					}
				}
				ocancel()
				if vid == "" {
					continue // not acknowledged: it may or may not have made a version
				}
				mu.Lock()
				if was, ok := versions[key+"/"+vid]; ok {
					dup++
					t.Logf("%s/%s acknowledged twice: %+v, then %+v", key, vid, was, rec)
				}
				versions[key+"/"+vid] = rec
				mu.Unlock()
			}
		}()
	}
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
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(versions) }
	// A kill once the writers made progress since the last one (bounded).
	waitProgress := func(from int) {
		for deadline := time.Now().Add(time.Minute); count() < from+50 && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
		}
	}
	g := srv.MetaGroup()
	for round := 1; round <= kills && replicas > 1; round++ {
		waitProgress(count())
		ld := leader()
		if err := g.Kill(ld); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: leader %d killed -9 with %d versions acknowledged", round, ld, count())
		time.Sleep(2 * time.Second)
		if err := g.Restart(ld); err != nil {
			t.Fatal(err)
		}
	}
	// Then a datanode, killed -9 while the writers put versions in blocks
	// to its pipelines (restarted 2 s later).
	waitProgress(count())
	killDatanode(ctx, t, srv, 1+count()%4, count)
	waitProgress(count())
	close(stop)
	wg.Wait()

	kc, mc := newKC()
	lost := 0
	for kv, a := range versions {
		vid := strings.TrimPrefix(kv, a.key+"/")
		v, err := versionapi.Get(ctx, mc, versionapi.Ref{Bucket: bucket, Key: a.key, VersionID: vid})
		if err != nil || v.DeleteMarker != (a.seed < 0) {
			lost++
			t.Errorf("acknowledged version %s of %s (marker %v): %v", vid, a.key, a.seed < 0, err)
			continue
		}
		if a.seed < 0 {
			continue
		}
		var buf bytes.Buffer
		if err := kc.ReadKey(ctx, v.KeyInfo, 0, int64(v.Size), &buf, keyclient.GetOptions{}); err != nil || !bytes.Equal(buf.Bytes(), versionValue(a.seed)) {
			lost++
			t.Errorf("acknowledged version %s of %s: %v (%d bytes)", vid, a.key, err, buf.Len())
		}
	}
	listed := map[string]bool{}
	prev := map[string]string{}
	o := versionapi.ListOptions{}
	for range 10000 {
		l, err := versionapi.ListVersions(ctx, mc, bucket, o)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range l.Versions {
			if p, ok := prev[v.Key]; ok && v.VersionID >= p {
				t.Errorf("%s: version %s listed after %s (want newest first)", v.Key, v.VersionID, p)
			}
			prev[v.Key], listed[v.Key+"/"+v.VersionID] = v.VersionID, true
		}
		if !l.Truncated {
			break
		}
		o.KeyMarker, o.VersionIDMarker = l.NextKeyMarker, l.NextVersionIDMarker
	}
	for kv := range versions {
		if !listed[kv] {
			t.Errorf("acknowledged version %s not listed", kv)
		}
	}
	t.Logf("versions HA: %d operations, %d versions acknowledged (%d listed), %d lost, %d version IDs given twice, %d leader kills, 1 datanode kill",
		ops, len(versions), len(listed), lost, dup, kills)
	if dup > 0 {
		t.Errorf("%d acknowledged writes got a version ID another write of their key had", dup)
	}
	if len(versions) == 0 {
		t.Fatal("no version acknowledged")
	}
}

// killDatanode kills datanode id -9, restarts it 2 s later and waits until
// it is ready; count is the test's progress (operations acknowledged),
// logged.
func killDatanode(ctx context.Context, t *testing.T, srv *server.Server, id int, count func() int) {
	t.Helper()
	if err := srv.Cluster().Kill(id); err != nil {
		t.Fatal(err)
	}
	t.Logf("datanode %d killed -9 after %d operations acknowledged", id, count())
	time.Sleep(2 * time.Second)
	if err := srv.Cluster().Restart(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// versionValue is a version's value from its seed: most 1..16 KiB
// (inline), one in four 200..400 KiB (in blocks).
func versionValue(seed int64) []byte {
	rng := rand.New(rand.NewSource(seed))
	n := 1024 + rng.Intn(15<<10)
	if rng.Intn(4) == 0 {
		n = 200<<10 + rng.Intn(200<<10)
	}
	b := make([]byte, n)
	rng.Read(b)
	return b
}
