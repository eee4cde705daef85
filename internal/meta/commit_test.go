package meta

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/vfs"
)

// walSync reports whether op syncs the store's write-ahead log.
func walSync(op vfs.Op) bool {
	return (op.Kind == vfs.OpSync || op.Kind == vfs.OpSyncData) && strings.HasSuffix(op.Path, ".log")
}

// memCluster is a cluster of three fake datanodes around a Service whose
// store is on a MemFS, with a key committed.
func memCluster(t *testing.T, hook func(own bool)) (*fakeCluster, *vfs.MemFS, state.Config) {
	t.Helper()
	fs := vfs.NewMem()
	clk := newClock()
	cfg := testConfig("/meta", clk)
	cfg.FS = fs
	cfg.PipelinesPerNode = 1
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.AwaitHook = hook // before any request
	t.Cleanup(func() { // a test may inject a fault the store's Close meets
		if err := s.Close(); err != nil && !errors.Is(err, vfs.ErrInjected) {
			t.Errorf("close: %v", err)
		}
	})
	c := &fakeCluster{t: t, s: s, clk: clk}
	for range 3 {
		c.add()
	}
	mustNo(t, s.Tick())
	c.settle()
	mustNo(t, ignore(s.CreateBucket("bkt")))
	c.put("bkt", "k1", 1, 10)
	return c, fs, cfg
}

// A failed WAL sync fails the service for good: the request whose batch
// it was gets an error, so does a read that saw that batch's change while
// its sync was under way (it must not answer with a change that is not
// durable), and every later request, writes and reads, is refused even
// once the disk works again. A crash then keeps what was acknowledged and
// not the failed change.
func TestFailedSyncRefusesRequestsForGood(t *testing.T) {
	var readSaw chan struct{}
	var armed atomic.Bool
	hook := func(own bool) {
		if !own && armed.Load() {
			close(readSaw) // the read looked at the state and waits now
		}
	}
	c, fs, cfg := memCluster(t, hook)
	s := c.s

	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fs.InjectErrors(func(op vfs.Op) error {
		if !walSync(op) {
			return nil
		}
		once.Do(func() { close(entered) })
		<-release
		return vfs.ErrInjected
	})
	created := make(chan error, 1)
	go func() {
		_, err := s.CreateBucket("second")
		created <- err
	}()
	<-entered // second is applied, its sync under way
	readSaw = make(chan struct{})
	armed.Store(true)
	listed := make(chan error, 1)
	go func() {
		l, err := s.ListBuckets()
		if err == nil {
			err = errors.New("answered " + strings.Join(bucketNames(l), ","))
		}
		listed <- err
	}()
	<-readSaw // the list saw second and waits for its durability
	armed.Store(false)
	close(release)
	if err := <-created; !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("create second with its WAL sync failing: %v, want the injected error", err)
	}
	if err := <-listed; err == nil || strings.HasPrefix(err.Error(), "answered") {
		t.Fatalf("list buckets that saw second while its sync failed: %v, want an error", err)
	}

	fs.InjectErrors(nil) // the disk works again: the service still refuses
	checks := map[string]error{
		"create bucket": ignore(s.CreateBucket("third")),
		"allocate":      ignore(s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: "k2"})),
		"commit":        ignore(s.CommitKey("bkt", "k1", &metaapi.CommitKey{})),
		"delete key":    s.DeleteKey("bkt", "k1"),
		"heartbeat":     ignore(s.Heartbeat(c.nodes[0].report())),
		"tick":          s.Tick(),
		"get key":       ignore(s.GetKey("bkt", "k1")),
		"list buckets":  ignore(s.ListBuckets()),
		"nodes":         ignore(s.Nodes()),
		"exit safemode": ignore(s.ExitSafeMode()),
	}
	for what, err := range checks {
		if !errors.Is(err, vfs.ErrInjected) {
			t.Errorf("%s after the failed sync: %v, want a refusal naming the failure", what, err)
		}
	}

	// A power loss now keeps k1 and bkt (acknowledged), not second.
	crashed := fs.CrashClone(0, nil)
	cfg.FS = crashed
	s2 := open(t, cfg)
	l := must[*metaapi.BucketList](t)(s2.ListBuckets())
	if got := strings.Join(bucketNames(l), ","); got != "bkt" {
		t.Fatalf("buckets after the crash: %s, want bkt", got)
	}
	if ki, err := s2.GetKey("bkt", "k1"); err != nil || ki.Size != 10 {
		t.Fatalf("k1 after the crash: %v, %v", ki, err)
	}
}

func bucketNames(l *metaapi.BucketList) []string {
	var names []string
	for _, b := range l.Buckets {
		names = append(names, b.Name)
	}
	return names
}

// Concurrent changes share WAL syncs: with the first sync held, 16
// concurrent bucket creations apply and queue behind it, and one more sync
// makes all of them durable (with the lock held across each sync, as
// before, they could not even apply: 17 syncs, one after the other).
func TestConcurrentCommitsShareSyncs(t *testing.T) {
	const writers = 16
	var counting atomic.Bool
	var waiting atomic.Int32
	queued := make(chan struct{})
	hook := func(own bool) {
		if own && counting.Load() && waiting.Add(1) == writers+1 {
			close(queued) // every creation applied its batch and waits
		}
	}
	c, fs, _ := memCluster(t, hook)
	var syncs atomic.Int32
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fs.InjectErrors(func(op vfs.Op) error {
		if walSync(op) {
			syncs.Add(1)
			once.Do(func() {
				close(entered)
				<-release
			})
		}
		return nil
	})
	counting.Store(true)
	errs := make(chan error, writers+1)
	go func() { errs <- ignore(c.s.CreateBucket("first")) }()
	<-entered // the first creation's sync is held
	for i := range writers {
		go func() { errs <- ignore(c.s.CreateBucket(fmt.Sprintf("b%02d", i))) }()
	}
	<-queued
	close(release)
	for range writers + 1 {
		mustNo(t, <-errs)
	}
	if n := syncs.Load(); n != 2 {
		t.Fatalf("%d WAL syncs for %d creations queued behind a held sync, want 2 (the held one and one for the rest)", n, writers+1)
	}
	l := must[*metaapi.BucketList](t)(c.s.ListBuckets())
	if len(l.Buckets) != writers+2 {
		t.Fatalf("%d buckets, want %d", len(l.Buckets), writers+2)
	}
}
