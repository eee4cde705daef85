package chaos

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/lifecycle"
	"github.com/spindle-store/spindle/internal/meta"
	"github.com/spindle-store/spindle/internal/metaapi/s3meta"
	"github.com/spindle-store/spindle/internal/server"
	"github.com/spindle-store/spindle/internal/testutil"
)

// TestLifecycleBenchPutStall is issue 35's lifecycle acceptance, a bench
// run only when LIFECYCLE_BENCH is set (the objects to expire, e.g.
// 100000; not in make test): a spindle server (3 datanodes, the meta
// service in process) holds LIFECYCLE_BENCH objects of 1 KiB in blocks
// (inline values off), a rule expires them all (LIFECYCLE_RATE objects a
// second, default lifecycle's) while 4 writers PUT new keys of another
// prefix, first 5 s without expiry (a baseline of the machine's own
// stalls) (LIFECYCLE_BENCH_INLINE=1: the objects to expire are written
// inline, much faster, and have no blocks); it reports the run's time, the PUTs done meanwhile and the
// longest stretch without a PUT completing (the acceptance wants at most
// 1 s), and that the datanodes' used bytes came down.
func TestLifecycleBenchPutStall(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("LIFECYCLE_BENCH"))
	if n <= 0 {
		t.Skip("LIFECYCLE_BENCH=OBJECTS runs it")
	}
	rate, _ := strconv.Atoi(os.Getenv("LIFECYCLE_RATE"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	srv, err := server.Start(ctx, server.Config{Dir: t.TempDir(), Datanodes: 3, MetaListen: "127.0.0.1:0", Binary: spindleBin,
		Meta:   meta.Config{Lifecycle: lifecycle.Settings{Day: time.Second, Interval: 200 * time.Millisecond, Rate: rate}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, srv)
	mc := srv.Meta()
	const bucket = "lcbench"
	if _, err := mc.CreateBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	kc, err := keyclient.New(mc, keyclient.Options{InlineMaxBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, kc)
	fill := kc // LIFECYCLE_BENCH_INLINE=1: the objects to expire inline (faster to write; no blocks to free)
	if inline := os.Getenv("LIFECYCLE_BENCH_INLINE") != ""; inline {
		if fill, err = keyclient.New(mc, keyclient.Options{}); err != nil {
			t.Fatal(err)
		}
		defer testutil.CloseT(t, fill)
	}
	value := strings.Repeat("v", 1024)
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				if _, err := fill.Put(ctx, bucket, fmt.Sprintf("old/%07d", i), strings.NewReader(value), keyclient.PutOptions{}); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d puts failed", failed.Load())
	}
	t.Logf("%d objects written in %s", n, time.Since(start).Round(time.Millisecond))
	var before uint64
	until(t, time.Minute, "the datanodes report the bytes written", func() bool {
		before = usedBytes(ctx, t, mc)
		return fill != kc || before >= 3*uint64(n)*1024
	})
	// the writers, then the rule
	var mu sync.Mutex
	last, longest, puts := time.Now(), time.Duration(0), 0
	stop := make(chan struct{})
	var writers sync.WaitGroup
	for w := range 4 {
		writers.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := kc.Put(ctx, bucket, fmt.Sprintf("new/%d/%07d", w, i), strings.NewReader(value), keyclient.PutOptions{}); err != nil {
					t.Errorf("put during the expiry: %v", err)
					return
				}
				mu.Lock()
				now := time.Now()
				longest, last = max(longest, now.Sub(last)), now
				puts++
				mu.Unlock()
			}
		})
	}
	// a baseline: the same writers for 5 s without expiry (the machine's
	// own stalls)
	mu.Lock()
	last, longest = time.Now(), 0
	mu.Unlock()
	time.Sleep(5 * time.Second)
	mu.Lock()
	baseline, basePuts := longest, puts
	last, longest, puts = time.Now(), 0, 0
	mu.Unlock()
	t.Logf("baseline, 5 s without expiry: %d PUTs (%.0f/s); longest stretch without a PUT: %s", basePuts, float64(basePuts)/5, baseline.Round(time.Millisecond))
	if err := s3meta.PutBucketConf(ctx, mc, bucket, s3meta.ConfLifecycle,
		lcRules(t, `<Rule><ID>old</ID><Filter><Prefix>old/</Prefix></Filter><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>`)); err != nil {
		t.Fatal(err)
	}
	expStart := time.Now()
	var st *lifecycle.Status
	until(t, 25*time.Minute, "every object expired", func() bool {
		if st, err = lifecycle.GetStatus(ctx, mc); err != nil {
			t.Fatal(err)
		}
		return st.Total.Expired >= uint64(n)
	})
	took := time.Since(expStart)
	mu.Lock()
	t.Logf("%d objects expired in %s (%.0f/s; rate limit %d/s); %d PUTs meanwhile (%.0f/s); longest stretch without a PUT: %s",
		n, took.Round(time.Millisecond), float64(n)/took.Seconds(), cmp.Or(rate, lifecycle.DefaultRate), puts, float64(puts)/took.Seconds(), longest.Round(time.Millisecond))
	mu.Unlock()
	// The writers go on while the datanodes delete the expired blocks
	// (after the expiry: the block GC's commands, then each replica's
	// deletions), so that a stall there is counted too. Their own bytes
	// are subtracted from the used bytes at the old objects' cost each.
	perObj := float64(before) / float64(n)
	var now, fresh uint64
	until(t, 5*time.Minute, "the datanodes free the expired blocks", func() bool {
		mu.Lock()
		p := puts
		mu.Unlock()
		now, fresh = usedBytes(ctx, t, mc), uint64(perObj*float64(p))
		return fill != kc || now < before/2+fresh
	})
	freed := time.Since(expStart) // before the writers' shutdown
	close(stop)
	writers.Wait()
	mu.Lock()
	t.Logf("freed %s after the expiry began; %d PUTs in all (%.0f/s); longest stretch without a PUT from the expiry's start to the blocks freed: %s",
		freed.Round(time.Millisecond), puts, float64(puts)/freed.Seconds(), longest.Round(time.Millisecond))
	mu.Unlock()
	t.Logf("datanodes' used bytes: %d before, %d after (%d of them the PUTs made meanwhile)", before, now, fresh)
}
