package chaos

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/testutil"

	"github.com/anishathalye/porcupine"

	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/server"
)

// Bounds of TestMetaHAAcceptance: its long form (SPINDLE_META_HA=1) and
// its short form (make test: about a minute).
const (
	metaHAClients      = 16
	metaHAShortClients = 8
	metaHAHotKeys      = 4
	metaHAKills        = 5
	metaHAShortKills   = 3
	metaHAMaxOps       = 200000 // per run, all clients
	metaHAOpTimeout    = 30 * time.Second
	metaHARunBudget    = 10 * time.Minute
	metaHAShortBudget  = 4 * time.Minute
)

// TestMetaHAAcceptance is issue 14's acceptance: spindle server
// --meta-replicas 3 (mutual TLS) with 4 datanodes, all separate processes;
// clients put keys written once and put, get and delete 4 hot keys; the
// meta leader is killed -9 several times (restarted 2 s later), the last
// time but one while a follower was killed just before and is restarting.
// Then every acknowledged put must read back, and the hot keys' history
// must be linearizable (porcupine, the hot-key register model of bench
// chaos; an inconclusive check fails too). It reports the longest window
// without a successful put (not asserted: a figure).
//
// The long form (SPINDLE_META_HA=1, make accept-meta-ha; minutes): 16
// clients, five leader kills. The short form, in make test (skipped with
// -short; about a minute): 8 clients, three leader kills (issue 31 item 7:
// CI never ran the failover).
func TestMetaHAAcceptance(t *testing.T) {
	clients, kills, budget := metaHAClients, metaHAKills, metaHARunBudget
	if os.Getenv("SPINDLE_META_HA") == "" {
		if testing.Short() {
			t.Skip("a one-minute multi-process run (SPINDLE_META_HA=1, make accept-meta-ha: the long form)")
		}
		clients, kills, budget = metaHAShortClients, metaHAShortKills, metaHAShortBudget
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	srv, err := server.Start(ctx, server.Config{Dir: t.TempDir(), Datanodes: 4, MetaReplicas: 3, MetaListen: "127.0.0.1:0",
		Binary: spindleBin, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, srv)
	addrs := strings.Split(srv.MetaAddr(), ",")
	if _, err := srv.Meta().CreateBucket(ctx, "metaha"); err != nil {
		t.Fatal(err)
	}
	newKC := func() *keyclient.Client {
		mc, err := metaapi.NewClient(srv.MetaAddr(), metaapi.ClientOptions{TLS: srv.ClientTLS()})
		if err != nil {
			t.Fatal(err)
		}
		kc, err := keyclient.New(mc, keyclient.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return kc
	}
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }

	var mu sync.Mutex
	var hist []porcupine.Operation
	var putDone []int64
	acked := map[string]int64{} // cold key → value seed
	ops := 0
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kc := newKC()
			rng := rand.New(rand.NewSource(int64(c)))
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				ops++
				over := ops > metaHAMaxOps
				mu.Unlock()
				if over {
					return
				}
				octx, ocancel := context.WithTimeout(ctx, metaHAOpTimeout)
				hot := rng.Intn(metaHAHotKeys)
				hk := fmt.Sprintf("hot/%02d", hot)
				call := now()
				switch r := rng.Intn(10); {
				case r < 4: // a cold key, written once
					k, seed := fmt.Sprintf("cold/%02d/%06d", c, n), int64(c)<<32|int64(n)
					_, err := kc.Put(octx, "metaha", k, bytes.NewReader(metaHAValue(seed)), keyclient.PutOptions{})
					if err == nil {
						mu.Lock()
						acked[k] = seed
						putDone = append(putDone, now())
						mu.Unlock()
					}
				case r < 7: // a hot put: the value names its version
					v := uint64(c+1)<<32 | uint64(n+1)
					_, err := kc.Put(octx, "metaha", hk, bytes.NewReader(binary.LittleEndian.AppendUint64(make([]byte, 0, 512), v)), keyclient.PutOptions{})
					op := porcupine.Operation{ClientId: c, Input: hotInput{key: hot, op: opPut, version: v}, Call: call, Return: now(), Output: hotOutput{}}
					if err != nil {
						op.Output, op.Return = hotOutput{unknown: true}, math.MaxInt64
					}
					mu.Lock()
					hist = append(hist, op)
					if err == nil {
						putDone = append(putDone, op.Return)
					}
					mu.Unlock()
				case r < 9: // a hot get
					var buf bytes.Buffer
					_, err := kc.Get(octx, "metaha", hk, &buf, keyclient.GetOptions{})
					var v uint64
					switch {
					case err == nil && buf.Len() >= 8:
						v = binary.LittleEndian.Uint64(buf.Bytes())
					case errors.Is(err, metaapi.ErrNotFound):
					default:
						ocancel()
						continue // a failed get had no effect
					}
					mu.Lock()
					hist = append(hist, porcupine.Operation{ClientId: c, Input: hotInput{key: hot, op: opGet}, Output: hotOutput{version: v}, Call: call, Return: now()})
					mu.Unlock()
				default: // a hot delete
					err := kc.Delete(octx, "metaha", hk)
					op := porcupine.Operation{ClientId: c, Input: hotInput{key: hot, op: opDelete}, Call: call, Return: now()}
					switch {
					case err == nil:
						op.Output = hotOutput{existed: true}
					case errors.Is(err, metaapi.ErrNotFound):
						op.Output = hotOutput{}
					default:
						op.Output, op.Return = hotOutput{unknown: true}, math.MaxInt64
					}
					mu.Lock()
					hist = append(hist, op)
					mu.Unlock()
				}
				ocancel()
			}
		}()
	}

	// The nemesis: kill -9 of the leader, kills times.
	leader := func() int {
		for range 200 {
			for i, a := range addrs {
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
	g := srv.MetaGroup()
	nemesisFrom := now()
	for round := 1; round <= kills; round++ {
		time.Sleep(5 * time.Second)
		ld := leader()
		if round == kills-1 {
			f := ld%3 + 1 // a follower down and restarting when the leader dies
			if err := g.Kill(f); err != nil {
				t.Fatal(err)
			}
			if err := g.Restart(f); err != nil {
				t.Fatal(err)
			}
			t.Logf("round %d: follower %d killed -9 and restarting", round, f)
		}
		if err := g.Kill(ld); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: leader %d killed -9 at %.1f s", round, ld, time.Since(start).Seconds())
		time.Sleep(2 * time.Second)
		if err := g.Restart(ld); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(5 * time.Second)
	nemesisTo := now()
	close(stop)
	wg.Wait()

	// Every acknowledged put reads back.
	kc := newKC()
	lost := 0
	for k, seed := range acked {
		var buf bytes.Buffer
		if _, err := kc.Get(ctx, "metaha", k, &buf, keyclient.GetOptions{}); err != nil || !bytes.Equal(buf.Bytes(), metaHAValue(seed)) {
			lost++
			t.Errorf("acknowledged put %s: %v (%d bytes)", k, err, buf.Len())
		}
	}
	sort.Slice(putDone, func(i, j int) bool { return putDone[i] < putDone[j] })
	gap := time.Duration(longestGap(putDone, nemesisFrom, nemesisTo))
	res, _ := checkLinearizable(hist, linearizabilityTimeout)
	t.Logf("meta HA: %d clients, %d operations, %d cold puts acknowledged, %d lost; %d hot-key operations: %v; %d leader kills; longest window without a successful put %.2f s",
		clients, ops, len(acked), lost, len(hist), res, kills, gap.Seconds())
	if res != linOK {
		t.Fatalf("the hot keys' history is not linearizable: %v", res)
	}
	if len(acked) == 0 {
		t.Fatal("no put acknowledged")
	}
}

// metaHAValue is the value of a cold key (1..16 KiB, from its seed).
func metaHAValue(seed int64) []byte {
	rng := rand.New(rand.NewSource(seed))
	b := make([]byte, 1024*(1+rng.Intn(16)))
	rng.Read(b)
	return b
}
