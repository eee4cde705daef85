package ecnode_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi/ecapi"
	"github.com/spindle-store/spindle/internal/units"
)

// Issue 37's first acceptance line at its own scale, not run by make test
// (make check-ec-scale): SPINDLE_EC_SCALE=rs-3-2 (6 datanodes, raw ≤ 1.7×
// logical) or rs-6-3 (9 datanodes, ≤ 1.6×), or "all" for both; a bucket of
// SPINDLE_EC_SCALE_BYTES (default 2GiB) written, its containers closed and
// converted (replicas dropped), then every key read back byte for byte
// with every set of m datanodes stopped (SPINDLE_EC_SCALE_SETS=N: the
// first N sets of a seeded shuffle instead of all of them). Values are
// generated from their key's seed and compared by SHA-256, so the test
// holds none of them in memory.

// scaleKeyBytes bounds one value of the scale test (sizes are drawn in
// [scaleKeyBytes/4, scaleKeyBytes]).
const scaleKeyBytes = 48 << 20

// scaleCase is one policy's acceptance figures.
type scaleCase struct {
	policy   string
	nodes, m int
	maxRatio float64
}

var scaleCases = []scaleCase{{"rs-3-2", 6, 2, 1.7}, {"rs-6-3", 9, 3, 1.6}}

func TestECAcceptanceAtScale(t *testing.T) {
	which := os.Getenv("SPINDLE_EC_SCALE")
	if which == "" {
		t.Skip("SPINDLE_EC_SCALE=rs-3-2|rs-6-3|all (make check-ec-scale)")
	}
	total := int64(2 << 30)
	if s := os.Getenv("SPINDLE_EC_SCALE_BYTES"); s != "" {
		n, err := units.ParseBytes(s)
		if err != nil || n <= 0 {
			t.Fatalf("SPINDLE_EC_SCALE_BYTES=%q: want a size such as 2GiB", s)
		}
		total = n
	}
	sets := -1
	if s := os.Getenv("SPINDLE_EC_SCALE_SETS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("SPINDLE_EC_SCALE_SETS=%q: want a count ≥ 1", s)
		}
		sets = n
	}
	ran := false
	for _, sc := range scaleCases {
		if which != "all" && which != sc.policy {
			continue
		}
		ran = true
		t.Run(sc.policy, func(t *testing.T) { runScale(t, sc, total, sets) })
	}
	if !ran {
		t.Fatalf("SPINDLE_EC_SCALE=%q: want rs-3-2, rs-6-3 or all", which)
	}
}

// scaleValue writes value i of the scale test (its size and bytes follow
// from i alone) to w.
func scaleValue(i int, w io.Writer) (int64, error) {
	src := rand.NewChaCha8([32]byte{byte(i), byte(i >> 8), 37})
	size := scaleKeyBytes/4 + rand.New(src).IntN(scaleKeyBytes*3/4+1)
	buf := make([]byte, 1<<20)
	var n int64
	for left := size; left > 0; {
		b := buf[:min(len(buf), left)]
		_, _ = src.Read(b) // ChaCha8.Read never fails
		if _, err := w.Write(b); err != nil {
			return n, err
		}
		n += int64(len(b))
		left -= len(b)
	}
	return n, nil
}

func scaleDigest(i int) ([32]byte, int64) {
	h := sha256.New()
	n, _ := scaleValue(i, h) // a hash never fails a write
	return [32]byte(h.Sum(nil)), n
}

func runScale(t *testing.T, sc scaleCase, total int64, sets int) {
	c := startClusterWith(t, sc.nodes, func(cfg *state.Config) {
		cfg.ContainerSizeBytes = 256 << 20
		cfg.DeadAfter = time.Hour // stopped datanodes are not replaced meanwhile
	}, nil)
	ctx := context.Background()
	kc, err := keyclient.New(c.mc, keyclient.Options{ChunkSize: 1 << 20, BlockSize: 64 << 20, Logger: quiet, ReadTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = kc.Close() }()
	if _, err := kc.CreateBucket(ctx, "cold"); err != nil {
		t.Fatal(err)
	}
	if err := ecapi.SetBucket(ctx, c.mc, "cold", sc.policy); err != nil {
		t.Fatal(err)
	}

	// Write: 4 writers, values generated as they are sent.
	start := time.Now()
	type key struct {
		digest [32]byte
		size   int64
	}
	keys := map[int]key{}
	var logical int64
	for i := 0; logical < total; i++ {
		d, n := scaleDigest(i)
		keys[i] = key{d, n}
		logical += n
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(keys))
	next := make(chan int, len(keys))
	for i := range keys {
		next <- i
	}
	close(next)
	for range 4 {
		wg.Go(func() {
			for i := range next {
				pr, pw := io.Pipe()
				go func() { _, err := scaleValue(i, pw); pw.CloseWithError(err) }()
				if _, err := kc.Put(ctx, "cold", fmt.Sprintf("key-%04d", i), pr, keyclient.PutOptions{NoInline: true}); err != nil {
					errs <- fmt.Errorf("put key-%04d: %w", i, err)
					_ = pr.CloseWithError(err)
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
	t.Logf("%s: %d keys, %s logical written in %s", sc.policy, len(keys), units.FormatBytes(logical), time.Since(start).Round(time.Second))

	// Convert.
	start = time.Now()
	c.closeAll()
	waitFor(t, 30*time.Minute, "every container converted and its replicas dropped", c.convertedAndDropped)
	c.checkInvariant("after the conversions")
	blocks, shards := c.rawBytes()
	ratio := float64(blocks+shards) / float64(logical)
	t.Logf("%s: %d containers converted in %s; raw %s in shards, %s in block files: %.3f× logical (bound %.1f×)", sc.policy, len(c.usedContainers()),
		time.Since(start).Round(time.Second), units.FormatBytes(shards), units.FormatBytes(blocks), ratio, sc.maxRatio)
	if blocks != 0 || ratio > sc.maxRatio {
		t.Fatalf("raw bytes %.3f× logical (%d bytes of block files left), want ≤ %.1f× and none", ratio, blocks, sc.maxRatio)
	}

	// Read every key with every set of m datanodes stopped.
	check := func(where string) {
		t.Helper()
		rc, err := keyclient.New(c.mc, keyclient.Options{Logger: quiet, ReadTimeout: 30 * time.Second}) // a client that knows nothing yet
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = rc.Close() }()
		start := time.Now()
		for i, k := range keys {
			h := sha256.New()
			ki, err := rc.Get(ctx, "cold", fmt.Sprintf("key-%04d", i), h, keyclient.GetOptions{})
			if err != nil || int64(ki.Size) != k.size || !bytes.Equal(h.Sum(nil), k.digest[:]) {
				t.Fatalf("%s: get key-%04d: %d bytes (want %d), same bytes %v: %v", where, i, ki.Size, k.size, bytes.Equal(h.Sum(nil), k.digest[:]), err)
			}
		}
		t.Logf("%s: every key read back in %s (%.0f MB/s)", where, time.Since(start).Round(time.Millisecond), float64(logical)/1e6/time.Since(start).Seconds())
	}
	check("all datanodes up")
	all := combinations(sc.nodes, sc.m)
	if sets > 0 && sets < len(all) {
		rng := rand.New(rand.NewPCG(37, uint64(sc.nodes)))
		rng.Shuffle(len(all), func(a, b int) { all[a], all[b] = all[b], all[a] })
		all = all[:sets]
	}
	for _, down := range all {
		for _, i := range down {
			c.stop(i)
		}
		check(fmt.Sprintf("datanodes %v stopped", down))
		for _, i := range down {
			c.start(i)
		}
	}
	t.Logf("%s: every key read back with each of %d sets of %d datanodes stopped", sc.policy, len(all), sc.m)
}

// combinations lists the k-element subsets of 0..n-1.
func combinations(n, k int) [][]int {
	var out [][]int
	var pick func(from int, cur []int)
	pick = func(from int, cur []int) {
		if len(cur) == k {
			out = append(out, append([]int(nil), cur...))
			return
		}
		for i := from; i < n; i++ {
			pick(i+1, append(cur, i))
		}
	}
	pick(0, nil)
	return out
}
