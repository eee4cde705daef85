package chaos

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/lifecycle"
	"github.com/spindle-store/spindle/internal/meta"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/s3meta"
	"github.com/spindle-store/spindle/internal/metaapi/versionapi"
	"github.com/spindle-store/spindle/internal/server"
	"github.com/spindle-store/spindle/internal/testutil"
)

// lcRules is a lifecycle configuration document of rules (package
// lifecycle's XML), checked.
func lcRules(t testing.TB, rules ...string) []byte {
	t.Helper()
	c, err := lifecycle.Parse([]byte(`<LifecycleConfiguration>` + strings.Join(rules, "") + `</LifecycleConfiguration>`))
	if err != nil {
		t.Fatal(err)
	}
	return c.XML()
}

// until polls cond every 100 ms until it holds or the deadline passes.
func until(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func usedBytes(ctx context.Context, t testing.TB, mc *metaapi.Client) uint64 {
	nodes, err := mc.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, nd := range nodes {
		n += nd.UsedBytes
	}
	return n
}

// TestLifecycleExpiresAndFreesBlocks: a real spindle server (3 datanode
// processes) with a 1 s lifecycle day: objects of an unversioned bucket
// expire by prefix (the others stay), a versioned key keeps its current
// version and its NewerNoncurrentVersions newest noncurrent ones, a
// delete marker left alone is removed, an incomplete multipart upload is
// aborted; the status counts all of it, and the datanodes' used bytes
// come down by the expired versions' (their blocks deleted).
func TestLifecycleExpiresAndFreesBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("a multi-process run")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := server.Start(ctx, server.Config{Dir: t.TempDir(), Datanodes: 3, MetaListen: "127.0.0.1:0", Binary: spindleBin,
		Meta:   meta.Config{Lifecycle: lifecycle.Settings{Day: time.Second, Interval: 200 * time.Millisecond}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, srv)
	mc := srv.Meta()
	kc, err := keyclient.New(mc, keyclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, kc)
	const size = 256 << 10 // in blocks, not inline
	value := bytes.Repeat([]byte("L"), size)
	put := func(bucket, key string) string {
		t.Helper()
		r, err := kc.Put(ctx, bucket, key, bytes.NewReader(value), keyclient.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r.Key.VersionID
	}
	for _, b := range []string{"lcplain", "lcvers"} {
		if _, err := mc.CreateBucket(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := versionapi.SetState(ctx, mc, "lcvers", versionapi.Enabled); err != nil {
		t.Fatal(err)
	}
	const expiring = 20
	for i := range expiring {
		put("lcplain", fmt.Sprintf("tmp/%03d", i))
	}
	put("lcplain", "keep/a")
	var ids []string
	for range 5 {
		ids = append(ids, put("lcvers", "k"))
	}
	put("lcvers", "gone")
	if _, err := versionapi.Delete(ctx, mc, versionapi.Ref{Bucket: "lcvers", Key: "gone"}); err != nil {
		t.Fatal(err)
	}
	if _, err := mc.CreateUpload(ctx, metaapi.CreateUpload{Bucket: "lcplain", Key: "tmp/mpu"}); err != nil {
		t.Fatal(err)
	}
	// the heartbeats have reported everything written: tmp/*, keep/a, k's
	// 5 versions and gone, 3 replicas each (a bound of one object fewer,
	// as this had, let before miss one a datanode had not reported yet,
	// and the freed bytes could then never bring the sum under it: a
	// five-run failure on a259e5b, loaded)
	var before uint64
	until(t, time.Minute, "the datanodes report the bytes written", func() bool {
		before = usedBytes(ctx, t, mc)
		return before >= 3*uint64(expiring+1+5+1)*size
	})
	// gone's version, then its marker; k's two oldest; tmp/*: 23 versions
	freed := uint64(expiring+1+2) * size
	for bucket, doc := range map[string][]byte{
		"lcplain": lcRules(t, `<Rule><ID>tmp</ID><Filter><Prefix>tmp/</Prefix></Filter><Status>Enabled</Status><Expiration><Days>1</Days></Expiration>`+
			`<AbortIncompleteMultipartUpload><DaysAfterInitiation>1</DaysAfterInitiation></AbortIncompleteMultipartUpload></Rule>`),
		"lcvers": lcRules(t, `<Rule><ID>k</ID><Filter><Prefix>k</Prefix></Filter><Status>Enabled</Status><NoncurrentVersionExpiration><NoncurrentDays>1</NoncurrentDays><NewerNoncurrentVersions>2</NewerNoncurrentVersions></NoncurrentVersionExpiration></Rule>`,
			`<Rule><ID>gone</ID><Filter><Prefix>gone</Prefix></Filter><Status>Enabled</Status><NoncurrentVersionExpiration><NoncurrentDays>1</NoncurrentDays></NoncurrentVersionExpiration><Expiration><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration></Rule>`),
	} {
		if err := s3meta.PutBucketConf(ctx, mc, bucket, s3meta.ConfLifecycle, doc); err != nil {
			t.Fatal(err)
		}
	}
	var st *lifecycle.Status
	until(t, 2*time.Minute, "the rules applied", func() bool {
		if st, err = lifecycle.GetStatus(ctx, mc); err != nil {
			t.Fatal(err)
		}
		return st.Total == lifecycle.Counts{Expired: expiring, Noncurrent: 3, MarkersRemoved: 1, UploadsAborted: 1, BytesFreed: freed}
	})
	if st.Runs == 0 || st.Total.BytesFreed != freed {
		t.Fatalf("status %+v", st)
	}
	l, err := kc.ListPage(ctx, "lcplain", "", "", 100)
	if err != nil || len(l.Keys) != 1 || l.Keys[0].Key != "keep/a" {
		t.Fatalf("lcplain after expiry: %+v %v", l.Keys, err)
	}
	vl, err := versionapi.ListVersions(ctx, mc, "lcvers", versionapi.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range vl.Versions {
		got = append(got, v.Key+"/"+v.VersionID)
	}
	if want := []string{"k/" + ids[4], "k/" + ids[3], "k/" + ids[2]}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("lcvers versions %v, want %v", got, want)
	}
	ul, err := mc.ListUploads(ctx, metaapi.ListUploads{Bucket: "lcplain"})
	if err != nil || len(ul.Uploads) != 0 {
		t.Fatalf("uploads left: %+v %v", ul, err)
	}
	// the blocks deleted on the datanodes: the bytes they report come down
	until(t, 2*time.Minute, "the datanodes free the expired versions' blocks", func() bool {
		return usedBytes(ctx, t, mc)+3*freed <= before+3*size/2
	})
}

// TestLifecycleSurvivesLeaderKill: with a replicated meta service (3
// members), the leader is killed -9 while a lifecycle run expires 1,500
// objects (paced to 300 a second); the next leader resumes the run from
// the replicated cursor and completes it: every object expired, counted
// exactly once (the counts are written in the same batch as the
// deletions), no other key touched.
func TestLifecycleSurvivesLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("a multi-process run")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	srv, err := server.Start(ctx, server.Config{Dir: t.TempDir(), Datanodes: 3, MetaReplicas: 3, MetaListen: "127.0.0.1:0", Binary: spindleBin,
		MetaArgs: []string{"--lifecycle-day=1s", "--lifecycle-interval=200ms", "--lifecycle-rate=300", "--lifecycle-batch=50"},
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, srv)
	mc := srv.Meta()
	const bucket, n = "lcha", 1500
	if _, err := mc.CreateBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	kc, err := keyclient.New(mc, keyclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, kc)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				if _, err := kc.Put(ctx, bucket, fmt.Sprintf("old/%05d", i), strings.NewReader("x"), keyclient.PutOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if _, err := kc.Put(ctx, bucket, "new/keep", strings.NewReader("y"), keyclient.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s3meta.PutBucketConf(ctx, mc, bucket, s3meta.ConfLifecycle,
		lcRules(t, `<Rule><ID>old</ID><Filter><Prefix>old/</Prefix></Filter><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>`)); err != nil {
		t.Fatal(err)
	}
	status := func() *lifecycle.Status {
		st, err := lifecycle.GetStatus(ctx, mc)
		if err != nil {
			return &lifecycle.Status{}
		}
		return st
	}
	var at *lifecycle.Status
	until(t, time.Minute, "a run under way", func() bool {
		at = status()
		return at.Running && at.Run.Expired > 0
	})
	g := srv.MetaGroup()
	ld := 0
	until(t, 10*time.Second, "a meta leader", func() bool {
		for i, a := range strings.Split(srv.MetaAddr(), ",") {
			c, err := metaapi.NewClient(a, metaapi.ClientOptions{Attempts: 1, Timeout: time.Second, TLS: srv.ClientTLS()})
			if err != nil {
				t.Fatal(err)
			}
			if ms, err := c.MetaStatus(ctx); err == nil && ms.Serving {
				ld = i + 1
				return true
			}
		}
		return false
	})
	if err := g.Kill(ld); err != nil {
		t.Fatal(err)
	}
	t.Logf("leader %d killed -9 at %d expired (bucket %s key %q)", ld, at.Run.Expired, at.Bucket, at.Key)
	if at.Run.Expired >= n {
		t.Fatalf("the run was over before the kill (%d expired): pace it slower", at.Run.Expired)
	}
	var st *lifecycle.Status
	until(t, 2*time.Minute, "the run completed by the next leader", func() bool {
		st = status()
		return st.Runs >= 1 && st.Total.Expired >= n
	})
	if err := g.Restart(ld); err != nil {
		t.Fatal(err)
	}
	if st.Total.Expired != n {
		t.Fatalf("status after the kill: %+v (want %d expired, each once)", st, n)
	}
	l, err := kc.ListPage(ctx, bucket, "", "", 10)
	if err != nil || len(l.Keys) != 1 || l.Keys[0].Key != "new/keep" {
		t.Fatalf("keys left: %+v %v", l.Keys, err)
	}
}
