package ecnode_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/datanode"
	"github.com/spindle-store/spindle/internal/ec"
	"github.com/spindle-store/spindle/internal/ecnode"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/ecapi"
)

// TestECChaos is issue 37's second acceptance line as a long test (about
// a minute; make check-ec-chaos runs a longer one): 7 datanodes, an rs-3-2 bucket
// ("cold", cell 16 KiB) and a replicated one ("warm"); two writers put
// keys of mixed sizes (inline, in blocks, some over a container) into
// both the whole time, in alternating phases (a container all of whose
// keys are cold is converted, a mixed one stays replicated), while
// containers fill, close and convert; meanwhile datanodes are stopped and
// restarted (one or two at once, sometimes long enough to be declared
// DEAD), bytes flipped in the middle of shard files of converted
// containers and of block files of replicated ones, and one datanode is
// lost for good in the middle of a conversion (its converter crashed
// after a shard stored, at ecnode.StepStored). In the end: every
// container is a complete EC set on live datanodes (every shard verified)
// or has 3 CLOSED replicas on live ones; no shard file no layout names,
// no quarantined copy, no damaged block left, every rotten replica block
// repaired; every acknowledged key of both buckets reads back (SHA-256),
// with all live datanodes up and again with one more stopped: 0
// acknowledged bytes lost, 0 wrong. Seeded: SPINDLE_EC_CHAOS_SEED=N
// replays the choices (the timing is the machine's);
// SPINDLE_EC_CHAOS_EVENTS=N runs N events instead of 12. Without the
// scrubber's quarantine of a corrupt shard, or without the rebuild of a
// missing shard, the end state never comes and the test fails.
func TestECChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("starts seven datanodes and runs for minutes")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SPINDLE_EC_CHAOS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SPINDLE_EC_CHAOS_SEED=%q: want an unsigned integer", s)
		}
		seed = n
	}
	events := 12
	if s := os.Getenv("SPINDLE_EC_CHAOS_EVENTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 4 || n > 200 {
			t.Fatalf("SPINDLE_EC_CHAOS_EVENTS=%q: want a count in [4, 200]", s)
		}
		events = n
	}
	t.Logf("seed %d (SPINDLE_EC_CHAOS_SEED=%d replays its choices), %d events", seed, seed, events)
	began := time.Now()
	ch := &chaos{t: t, rng: rand.New(rand.NewPCG(seed, 37)), seed: seed, lost: -1}
	c := startClusterWith(t, 7, func(cfg *state.Config) {
		// A datanode stopped for more than 6 s is DEAD: its replicas
		// copied again, its shards rebuilt elsewhere; it may come back.
		cfg.StaleAfter, cfg.DeadAfter = 2*time.Second, 6*time.Second
	}, func(cfg *datanode.Config) {
		cfg.ScrubRateBytesPerS, cfg.ScrubInterval = 64<<20, 500*time.Millisecond
	})
	ch.c = c
	c.setHook(ch.hook)
	ctx := context.Background()
	kc := c.keyClient()
	for _, b := range []string{"cold", "warm"} {
		if _, err := kc.CreateBucket(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := ecapi.SetBucket(ctx, c.mc, "cold", "rs-3-2,cell=16KiB"); err != nil {
		t.Fatal(err)
	}

	// The writers, until the events are over (and at most maxKeys each).
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() { ch.writer(kc, w, stop) })
	}
	waitFor(t, 3*time.Minute, "a first container converted", func() bool { return c.status().Coded > 0 })
	for _, e := range ch.schedule(events) {
		switch e {
		case "lose":
			ch.lose()
		case "stop1":
			ch.restart(1)
		case "stop2":
			ch.restart(2)
		case "rot-shard":
			ch.rotShard()
		case "rot-replica":
			ch.rotReplica()
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("events over after %s; writers stopped", time.Since(began).Round(time.Second))

	// Every container CLOSED (the last OPEN ones too: each then converted
	// or replicated), then everything repaired, converted and dropped.
	c.closeAll()
	ch.settle()
	c.checkInvariant("after the chaos")
	ch.logCounts()
	ch.readBack("every live datanode up")
	other := ch.pickRunning(true)
	c.stop(other)
	ch.readBack(fmt.Sprintf("datanode %d lost, %d stopped too", ch.lost, other))
	c.start(other)
	t.Logf("0 acknowledged bytes lost, 0 wrong (%d keys, %d bytes; seed %d, %s)", ch.keys(), ch.bytes(), seed, time.Since(began).Round(time.Second))
}

// schedule is the seeded order of n events: at least two of each rot,
// a sixth of them two datanodes stopped at once, the others one, and
// the loss for good somewhere in the middle third.
func (ch *chaos) schedule(n int) []string {
	var out []string
	add := func(kind string, k int) {
		for range k {
			out = append(out, kind)
		}
	}
	add("rot-shard", max(2, n/5))
	add("rot-replica", max(2, n/6))
	add("stop2", n/6)
	add("stop1", n-1-len(out))
	ch.rng.Shuffle(len(out), func(a, b int) { out[a], out[b] = out[b], out[a] })
	at := n/3 + ch.rng.IntN(n/3+1)
	out = slices.Insert(out, at, "lose")
	ch.t.Logf("events: %v", out)
	return out
}

// ackedKey is an acknowledged put.
type ackedKey struct {
	bucket, key string
	size        int64
	digest      [32]byte
	blocks      []metaapi.BlockRef
}

// rotShard is a shard file flipped; rotBlock a replica's block file.
type rotShard struct {
	node, idx int
	container uint64
}

type rotBlock struct {
	node  int
	block metaapi.BlockRef
}

// chaos is TestECChaos's state: the acknowledged keys (the writers'), the
// faults injected and their counts (the test goroutine's).
type chaos struct {
	t    *testing.T
	c    *testCluster
	rng  *rand.Rand
	seed uint64

	mu     sync.Mutex
	acked  []ackedKey
	failed int // puts not acknowledged

	// The loss: the hook crashes the first conversion to reach
	// StepStored once armed, and names its converter in lostCh.
	armed       atomic.Bool
	lostCh      chan int
	quarantined atomic.Int64

	lost          int // the datanode lost for good (-1: none yet)
	lostID        uint64
	kills, deaths int
	rotShards     []rotShard
	rotBlocks     []rotBlock
}

func (ch *chaos) hook(i int, container uint64, step string) error {
	switch step {
	case ecnode.StepQuarantined:
		ch.quarantined.Add(1)
	case ecnode.StepStored:
		if ch.armed.CompareAndSwap(true, false) {
			ch.lostCh <- i
			return ecnode.ErrCrash // the converter stops here, as if killed
		}
	}
	return nil
}

// value is key (w, i)'s value: its size drawn from the mix (a quarter
// inline, most in a few blocks, one in ten over a 2 MiB container), its
// bytes from the seed.
func (ch *chaos) value(w, i int) []byte {
	src := rand.NewChaCha8([32]byte{byte(w), byte(i), byte(i >> 8), byte(ch.seed), byte(ch.seed >> 8), byte(ch.seed >> 16), byte(ch.seed >> 24), 37})
	r := rand.New(src)
	var size int
	switch p := r.IntN(20); {
	case p < 5:
		size = 1 + r.IntN(60<<10) // inline
	case p < 18:
		size = 100<<10 + r.IntN(700<<10)
	default:
		size = 2<<20 + r.IntN(1<<20) // over a container
	}
	v := make([]byte, size)
	_, _ = src.Read(v) // ChaCha8.Read never fails
	return v
}

// writer puts distinct keys until stop (at most maxKeys, at most about
// 1 MB/s): cold for 6 s, warm for 2 s, and again.
func (ch *chaos) writer(kc *keyclient.Client, w int, stop chan struct{}) {
	const maxKeys = 1500
	start := time.Now()
	var sent int64
	for i := range maxKeys {
		select {
		case <-stop:
			return
		default:
		}
		bucket := "cold"
		if time.Since(start)%(8*time.Second) >= 6*time.Second {
			bucket = "warm"
		}
		v := ch.value(w, i)
		key := fmt.Sprintf("w%d-%05d", w, i)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		res, err := kc.Put(ctx, bucket, key, bytes.NewReader(v), keyclient.PutOptions{})
		cancel()
		ch.mu.Lock()
		if err != nil {
			ch.failed++
		} else {
			k := ackedKey{bucket: bucket, key: key, size: int64(len(v)), digest: sha256.Sum256(v)}
			for _, b := range res.Key.Blocks {
				k.blocks = append(k.blocks, b.BlockRef)
			}
			ch.acked = append(ch.acked, k)
		}
		ch.mu.Unlock()
		sent += int64(len(v))
		if ahead := time.Duration(sent)*time.Second/1e6 - time.Since(start); ahead > 0 {
			select {
			case <-stop:
				return
			case <-time.After(ahead):
			}
		}
	}
}

func (ch *chaos) keys() int { ch.mu.Lock(); defer ch.mu.Unlock(); return len(ch.acked) }

func (ch *chaos) bytes() int64 {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	var n int64
	for _, k := range ch.acked {
		n += k.size
	}
	return n
}

// pickRunning is a random running datanode other than the lost one
// (holding: one that holds a shard, when one does).
func (ch *chaos) pickRunning(holding bool) int {
	var all, holders []int
	st := ch.c.status()
	for i, d := range ch.c.dns {
		if d.cancel == nil || i == ch.lost {
			continue
		}
		all = append(all, i)
		if holds(st, ch.c.nodeID(i)) {
			holders = append(holders, i)
		}
	}
	if holding && len(holders) > 0 {
		return holders[ch.rng.IntN(len(holders))]
	}
	return all[ch.rng.IntN(len(all))]
}

// restart stops n datanodes (two only while no shard is missing and no
// layout names the lost one: never more than rs-3-2's m = 2 shards of a
// container out at once), waits
// 0.2 to 9 s (past 6 s they are DEAD), and starts them again.
func (ch *chaos) restart(n int) {
	st := ch.c.status()
	if n == 2 && ((ch.lost >= 0 && holds(st, ch.lostID)) || st.ShardsMissing > 0 || st.Degraded > 0) {
		n = 1
	}
	var down []int
	for len(down) < n {
		if i := ch.pickRunning(false); !slices.Contains(down, i) {
			down = append(down, i)
		}
	}
	pause := time.Duration(200+ch.rng.IntN(8800)) * time.Millisecond
	for _, i := range down {
		ch.c.stop(i)
	}
	ch.kills += n
	if pause > 6*time.Second {
		ch.deaths += n
	}
	time.Sleep(pause) // the outage itself (what happens meanwhile is asserted at the end)
	for _, i := range down {
		ch.c.start(i)
	}
	ch.t.Logf("datanodes %v stopped for %s and started again", down, pause.Round(time.Millisecond))
}

// lose: the next conversion to store a shard crashes there, and its
// converter is lost for good (stopped, never started again). If none
// comes within 2 minutes (the writers' containers are all converted), a
// datanode holding shards is lost instead.
func (ch *chaos) lose() {
	ch.lostCh = make(chan int, 1)
	ch.armed.Store(true)
	why := "its conversion crashed after a shard stored"
	select {
	case ch.lost = <-ch.lostCh:
	case <-time.After(2 * time.Minute):
		if ch.armed.CompareAndSwap(true, false) {
			ch.lost, why = ch.pickRunning(true), "no conversion storing a shard came"
		} else {
			ch.lost = <-ch.lostCh
		}
	}
	ch.lostID = ch.c.nodeID(ch.lost)
	ch.c.stop(ch.lost)
	ch.t.Logf("datanode %d (node %d) lost for good: %s", ch.lost, ch.lostID, why)
}

// rotShard flips a byte in the middle of a shard file of a converted
// container not rotten yet, on a running datanode.
func (ch *chaos) rotShard() {
	cs := ch.c.status().Containers
	ch.rng.Shuffle(len(cs), func(a, b int) { cs[a], cs[b] = cs[b], cs[a] })
	for _, s := range cs {
		if slices.ContainsFunc(ch.rotShards, func(r rotShard) bool { return r.container == s.Container }) {
			continue
		}
		idx := ch.rng.IntN(len(s.Nodes))
		i := ch.c.indexOf(s.Nodes[idx])
		if i < 0 || i == ch.lost || ch.c.dns[i].cancel == nil {
			continue
		}
		p := ch.c.shardPath(i, s.Container, idx)
		info, err := os.Stat(p)
		if err != nil {
			continue // being moved or rebuilt
		}
		if err := flipByte(p, info.Size()/2); err != nil {
			ch.t.Fatal(err)
		}
		ch.rotShards = append(ch.rotShards, rotShard{node: i, idx: idx, container: s.Container})
		ch.t.Logf("rot: shard %d of container %d on datanode %d, a byte flipped at %d of %d", idx, s.Container, i, info.Size()/2, info.Size())
		return
	}
	ch.t.Log("rot: no shard to rot")
}

// rotReplica flips a byte in the middle of an acknowledged block's file
// on one datanode holding a CLOSED replica of its container, one that
// is not erasure-coded (a replicated or mixed container, or one not yet
// converted) and not rotten yet; a warm key's block when one is.
func (ch *chaos) rotReplica() {
	ch.mu.Lock()
	keys := slices.Clone(ch.acked)
	ch.mu.Unlock()
	ch.rng.Shuffle(len(keys), func(a, b int) { keys[a], keys[b] = keys[b], keys[a] })
	// The warm keys' blocks first: their containers stay replicated.
	slices.SortStableFunc(keys, func(a, b ackedKey) int { return strings.Compare(b.bucket, a.bucket) })
	coded := map[uint64]bool{}
	for _, s := range ch.c.status().Containers {
		coded[s.Container] = true
	}
	for _, k := range keys {
		for _, b := range k.blocks {
			if coded[b.Container] || slices.ContainsFunc(ch.rotBlocks, func(r rotBlock) bool { return r.block.Container == b.Container }) {
				continue
			}
			for _, i := range ch.rng.Perm(len(ch.c.dns)) {
				if i == ch.lost || ch.c.dns[i].cancel == nil || !ch.closedOn(i, b.Container) {
					continue
				}
				data, _ := datanode.DefaultDirs(ch.c.dns[i].dir)
				id := engine.BlockID{Container: engine.ContainerID(b.Container), Local: b.Local}
				info, err := os.Stat(engine.BlockFilePath(data, id))
				if err != nil || info.Size() < 2 {
					continue
				}
				if err := engine.FlipBlockByte(data, id, info.Size()/2, 0xff); err != nil {
					continue // dropped meanwhile (converted)
				}
				ch.rotBlocks = append(ch.rotBlocks, rotBlock{node: i, block: b})
				ch.t.Logf("rot: block %d/%d (key %s/%s) on datanode %d, a byte flipped at %d of %d", b.Container, b.Local, k.bucket, k.key, i, info.Size()/2, info.Size())
				return
			}
		}
	}
	ch.t.Log("rot: no replica to rot")
}

// closedOn: datanode i reports a CLOSED replica of container cid.
func (ch *chaos) closedOn(i int, cid uint64) bool {
	id := ch.c.nodeID(i)
	ch.c.svc.Mu.RLock()
	defer ch.c.svc.Mu.RUnlock()
	n := ch.c.svc.NodeByID[id]
	if n == nil {
		return false
	}
	r, ok := n.Containers[cid]
	return ok && r.State == metaapi.ContainerClosed
}

func flipByte(p string, off int64) (err error) {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		return err
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, off); err != nil {
		return err
	}
	return f.Sync()
}

// settle waits (bounded) until the cluster is whole again, the same for
// 40 checks in a row (no conversion or repair about to start): see
// unsettled.
func (ch *chaos) settle() {
	ch.t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for ok := 0; ok < 40; {
		why := ch.unsettled()
		if why == "" {
			ok++
		} else {
			ok = 0
			if time.Now().After(deadline) {
				ch.t.Fatalf("not whole again after 5 minutes: %s", why)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// unsettled says what is not whole yet ("": nothing): no conversion or
// shard repair in flight, none missing; every used container coded with
// every shard on a live datanode, verified, and no replica left on a
// live one, or with 3 CLOSED replicas on live datanodes; no shard file no
// layout names, no quarantined copy; no damaged block; every rotten
// replica block the same bytes as the other replicas.
func (ch *chaos) unsettled() string {
	c := ch.c
	st := c.status()
	if len(st.Conversions) > 0 || len(st.Repairs) > 0 || st.ShardsMissing > 0 || st.Unrecoverable > 0 || st.Degraded > 0 {
		return fmt.Sprintf("EC: %d conversions, %d repairs in flight, %d shards missing, %d degraded, %d unrecoverable",
			len(st.Conversions), len(st.Repairs), st.ShardsMissing, st.Degraded, st.Unrecoverable)
	}
	layout := map[uint64][]uint64{}
	for _, cs := range st.Containers {
		layout[cs.Container] = cs.Nodes
	}
	now := time.Now()
	for _, cid := range c.usedContainers() {
		c.svc.Mu.RLock()
		reps := c.svc.ReplicasOf(cid, now)
		var held []uint64
		for id, n := range c.svc.NodeByID {
			if _, ok := n.Containers[cid]; ok && id != ch.lostID {
				held = append(held, id)
			}
		}
		c.svc.Mu.RUnlock()
		if nodes, ok := layout[cid]; ok {
			if len(held) > 0 {
				return fmt.Sprintf("container %d is coded but live datanodes %v still hold replicas", cid, held)
			}
			for idx, id := range nodes {
				i := c.indexOf(id)
				if id == ch.lostID || i < 0 || c.dns[i].cancel == nil {
					return fmt.Sprintf("shard %d of container %d on node %d, not a live datanode", idx, cid, id)
				}
				if err := verifyShardFile(c.shardPath(i, cid, idx)); err != nil {
					return fmt.Sprintf("shard %d of container %d on datanode %d: %v", idx, cid, i, err)
				}
			}
			continue
		}
		if len(reps) < 3 || slices.Contains(reps, ch.lostID) {
			return fmt.Sprintf("replicated container %d has CLOSED replicas on %v (lost: node %d)", cid, reps, ch.lostID)
		}
	}
	if l := c.leftovers(); len(l) > 0 {
		return fmt.Sprintf("shard files no layout names: %v", l)
	}
	for i, d := range c.dns {
		if d.cancel == nil {
			continue
		}
		data, _ := datanode.DefaultDirs(d.dir)
		if q, _ := filepath.Glob(filepath.Join(data, "ec", "*.corrupt")); len(q) > 0 {
			return fmt.Sprintf("datanode %d keeps quarantined shards %v", i, q)
		}
	}
	dm, err := c.mc.Damaged(context.Background())
	if err != nil {
		return err.Error()
	}
	if len(dm.Repairable) > 0 || len(dm.Lost) > 0 || dm.Repairs > 0 {
		return fmt.Sprintf("damaged blocks: %d repairable, %d lost, %d repairs in flight", len(dm.Repairable), len(dm.Lost), dm.Repairs)
	}
	for _, r := range ch.rotBlocks {
		if same, why := ch.replicasAgree(r.block); !same {
			return why
		}
	}
	return ""
}

func verifyShardFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	_, err = ec.VerifyShard(f, info.Size())
	return err
}

// replicasAgree: block b's files on the live datanodes that have one
// hold the same bytes.
func (ch *chaos) replicasAgree(b metaapi.BlockRef) (bool, string) {
	var first []byte
	firstAt := -1
	for i, d := range ch.c.dns {
		if d.cancel == nil || i == ch.lost {
			continue
		}
		data, _ := datanode.DefaultDirs(d.dir)
		got, err := os.ReadFile(engine.BlockFilePath(data, engine.BlockID{Container: engine.ContainerID(b.Container), Local: b.Local}))
		if err != nil {
			continue
		}
		if firstAt < 0 {
			first, firstAt = got, i
		} else if !bytes.Equal(got, first) {
			return false, fmt.Sprintf("block %d/%d differs between datanodes %d and %d", b.Container, b.Local, firstAt, i)
		}
	}
	return true, ""
}

// readBack reads every acknowledged key through a new key client and
// compares its SHA-256; it fails listing the keys lost or wrong.
func (ch *chaos) readBack(where string) {
	ch.t.Helper()
	kc := ch.c.keyClient()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ch.mu.Lock()
	keys := slices.Clone(ch.acked)
	ch.mu.Unlock()
	var lost, wrong []string
	var lostBytes, wrongBytes int64
	for _, k := range keys {
		h := sha256.New()
		ki, err := kc.Get(ctx, k.bucket, k.key, h, keyclient.GetOptions{})
		switch {
		case err != nil:
			lost = append(lost, fmt.Sprintf("%s/%s: %v", k.bucket, k.key, err))
			lostBytes += k.size
		case int64(ki.Size) != k.size || !bytes.Equal(h.Sum(nil), k.digest[:]):
			wrong = append(wrong, fmt.Sprintf("%s/%s: %d bytes, want %d", k.bucket, k.key, ki.Size, k.size))
			wrongBytes += k.size
		}
	}
	if len(lost)+len(wrong) > 0 {
		ch.t.Fatalf("%s: %d acknowledged bytes lost (%d keys), %d wrong (%d keys) of %d keys: %v %v", where, lostBytes, len(lost), wrongBytes, len(wrong), len(keys), lost, wrong)
	}
	ch.t.Logf("%s: every one of %d acknowledged keys read back, SHA-256 equal: 0 bytes lost, 0 wrong", where, len(keys))
}

func (ch *chaos) logCounts() {
	st := ch.c.status()
	dm, err := ch.c.mc.Damaged(context.Background())
	if err != nil {
		ch.t.Fatal(err)
	}
	per := map[string]int{}
	perBytes := map[string]int64{}
	inline := 0
	ch.mu.Lock()
	for _, k := range ch.acked {
		per[k.bucket]++
		perBytes[k.bucket] += k.size
		if len(k.blocks) == 0 {
			inline++
		}
	}
	failed := ch.failed
	ch.mu.Unlock()
	var scrubFound uint64
	for _, n := range dm.Scrub {
		scrubFound += n.DamageFound
	}
	// Each rot: repaired in place (the file whole again where it was)
	// or gone (its datanode lost, the shard moved, the replica dropped
	// after a conversion); settle made sure nothing rotten is left.
	shardsFixed, blocksFixed := 0, 0
	for _, r := range ch.rotShards {
		for _, cs := range st.Containers {
			if cs.Container == r.container && ch.c.indexOf(cs.Nodes[r.idx]) == r.node {
				shardsFixed++
			}
		}
	}
	for _, r := range ch.rotBlocks {
		data, _ := datanode.DefaultDirs(ch.c.dns[r.node].dir)
		if _, err := os.Stat(engine.BlockFilePath(data, engine.BlockID{Container: engine.ContainerID(r.block.Container), Local: r.block.Local})); err == nil && r.node != ch.lost {
			blocksFixed++
		}
	}
	ch.t.Logf("rot: %d of %d rotten shards rebuilt in place (the others moved or dropped with their datanode), %d of %d rotten replica blocks repaired in place (the others dropped: converted, or on the lost datanode)",
		shardsFixed, len(ch.rotShards), blocksFixed, len(ch.rotBlocks))
	if shardsFixed > 0 && ch.quarantined.Load() == 0 {
		ch.t.Fatalf("%d rotten shards are whole again in place, but the scrubber quarantined none", shardsFixed)
	}
	used := len(ch.c.usedContainers())
	ch.t.Logf("keys acknowledged: %d cold (%d bytes), %d warm (%d bytes), %d of them inline; %d puts not acknowledged",
		per["cold"], perBytes["cold"], per["warm"], perBytes["warm"], inline, failed)
	ch.t.Logf("containers used: %d, %d erasure-coded (conversions), %d replicated", used, st.Coded, used-st.Coded)
	ch.t.Logf("faults: %d datanode stops (%d long enough to be DEAD), 1 lost for good (datanode %d), %d shard files and %d replica block files rotten",
		ch.kills, ch.deaths, ch.lost, len(ch.rotShards), len(ch.rotBlocks))
	ch.t.Logf("repairs: %d shards quarantined by the scrubber, %d shards rebuilt (%d bytes, %d rebuilds failed); %d damaged blocks found by scrubbers, %d repaired (%d repairs failed)",
		ch.quarantined.Load(), st.RepairsDone, st.RepairedBytes, st.RepairsFailed, scrubFound, dm.RepairedBlocks, dm.FailedRepairs)
}
