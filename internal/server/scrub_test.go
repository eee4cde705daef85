package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/testutil"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// flipBlockByte flips one byte of block b's file in a datanode's volume.
func flipBlockByte(t *testing.T, dataDir string, b metaapi.BlockRef, at int64) {
	t.Helper()
	if err := engine.FlipBlockByte(dataDir, engine.BlockID{Container: engine.ContainerID(b.Container), Local: b.Local}, at, 0xff); err != nil {
		t.Fatal(err)
	}
}

// blockFileBytes reads block b's file in a datanode's volume.
func blockFileBytes(t *testing.T, dataDir string, b metaapi.BlockRef) []byte {
	t.Helper()
	got, err := os.ReadFile(engine.BlockFilePath(dataDir, engine.BlockID{Container: engine.ContainerID(b.Container), Local: b.Local}))
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestScrubberRepairsAndConfinesDamage is issue 15's scrubber acceptance,
// on 3 datanode processes scrubbing continuously:
//
//  1. a bit flipped in one replica of a block of a CLOSED container is
//     found by that datanode's scrubber without any read, and the block is
//     repaired from a good replica (the file's bytes are whole again);
//  2. a block damaged on all three replicas is lost: GET /v1/damaged names
//     the one key that holds it, the container is neither under-replicated
//     nor unrecoverable, every other key of the container reads back, the
//     CLI's get of the damaged key exits 5; once that key is deleted, no
//     damage is left and the container has its 3 healthy replicas.
func TestScrubberRepairsAndConfinesDamage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	s := startServer(t, dir, func(c *Config) {
		c.Meta.ContainerSizeBytes = 2 << 20 // closes after ~9 keys of 200 KiB
		c.DatanodeArgs = append(c.DatanodeArgs, "--scrub-rate", "100", "--scrub-interval", "200ms")
	})
	defer testutil.CloseT(t, s)
	kc := keyClient(t, s)
	mc, cl := s.Meta(), s.Cluster()
	const bucket, size = "scrubbed", 200 << 10
	if _, err := kc.CreateBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	blockOf := map[string]metaapi.BlockRef{}
	keyOf := map[metaapi.BlockRef]int{}
	for i := range 20 {
		key := fmt.Sprintf("k%02d", i)
		res, err := kc.Put(ctx, bucket, key, bytes.NewReader(value(i, size)), keyclient.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Key.Blocks) != 1 {
			t.Fatalf("key %s: %d blocks, want 1", key, len(res.Key.Blocks))
		}
		blockOf[key] = res.Key.Blocks[0].BlockRef
		keyOf[res.Key.Blocks[0].BlockRef] = i
	}
	// A CLOSED container with at least 4 of the keys, CLOSED on 3 replicas.
	var victim metaapi.ContainerInfo
	waitFor(t, ctx, "a CLOSED container with its 3 replicas CLOSED", func() (bool, error) {
		cs, err := mc.Containers(ctx)
		if err != nil {
			return false, err
		}
		for _, c := range cs {
			n := 0
			for b := range keyOf {
				if b.Container == c.ID {
					n++
				}
			}
			closed := 0
			for _, r := range c.ReplicaDetails {
				if r.State == metaapi.ContainerClosed {
					closed++
				}
			}
			if c.State == metaapi.ContainerClosed && closed == 3 && n >= 4 {
				victim = c
				return true, nil
			}
		}
		return false, nil
	})
	var blocks []metaapi.BlockRef
	for b := range keyOf {
		if b.Container == victim.ID {
			blocks = append(blocks, b)
		}
	}
	slices.SortFunc(blocks, func(a, b metaapi.BlockRef) int { return int(a.Local) - int(b.Local) })
	nodes := cl.Nodes()

	// 1. One replica damaged: found by its scrubber, repaired.
	one := blocks[0]
	good := blockFileBytes(t, nodes[1].DataDir, one)
	flipBlockByte(t, nodes[0].DataDir, one, 1234)
	if bytes.Equal(blockFileBytes(t, nodes[0].DataDir, one), good) {
		t.Fatal("the flip changed nothing")
	}
	waitFor(t, ctx, "the damaged block repaired", func() (bool, error) {
		st, err := mc.Damaged(ctx)
		if err != nil {
			return false, err
		}
		return st.RepairedBlocks >= 1 && len(st.Repairable) == 0 && len(st.Lost) == 0, nil
	})
	if got := blockFileBytes(t, nodes[0].DataDir, one); !bytes.Equal(got, good) {
		t.Fatal("the repaired block file does not hold the good replica's bytes")
	}
	st, err := mc.Damaged(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := uint64(0)
	for _, n := range st.Scrub {
		found += n.DamageFound
	}
	if found == 0 {
		t.Fatalf("no scrubber reports the damage it found: %+v", st.Scrub)
	}
	t.Logf("repair: %d blocks repaired; scrubbers: %+v", st.RepairedBlocks, st.Scrub)

	// 2. One block damaged on all three replicas.
	lost := blocks[1]
	lostKey := fmt.Sprintf("k%02d", keyOf[lost])
	for i, n := range nodes {
		flipBlockByte(t, n.DataDir, lost, int64(100+i))
	}
	waitFor(t, ctx, "the block reported lost on 3 replicas", func() (bool, error) {
		st, err := mc.Damaged(ctx)
		if err != nil {
			return false, err
		}
		return len(st.Lost) == 1 && len(st.Lost[0].Nodes) == 3, nil
	})
	st, err = mc.Damaged(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Lost[0].Container != lost.Container || st.Lost[0].Local != lost.Local {
		t.Fatalf("lost %+v, want block %v", st.Lost, lost)
	}
	if len(st.Keys) != 1 || st.Keys[0].Bucket != bucket || st.Keys[0].Key != lostKey {
		t.Fatalf("damaged keys %+v, want only %s/%s", st.Keys, bucket, lostKey)
	}
	rs, err := mc.Replication(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rs.Unrecoverable != 0 || rs.UnderReplicated != 0 {
		t.Fatalf("one lost block: %d containers unrecoverable, %d under-replicated; want 0 and 0", rs.Unrecoverable, rs.UnderReplicated)
	}
	for key, b := range blockOf {
		if b.Container != victim.ID || b == lost {
			continue
		}
		got, err := getErr(ctx, kc, bucket, key)
		if err != nil || !bytes.Equal(got, value(keyOf[b], size)) {
			t.Fatalf("key %s of the damaged container: %v (or wrong bytes)", key, err)
		}
	}
	if _, err := getErr(ctx, kc, bucket, lostKey); !errors.Is(err, keyclient.ErrCorrupt) {
		t.Fatalf("get of the damaged key: %v, want ErrCorrupt", err)
	}
	cmd := exec.CommandContext(ctx, spindleBin, append([]string{"get", "--meta", s.MetaAddr(), bucket + "/" + lostKey, filepath.Join(dir, "out")}, s.ClientArgs()...)...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 5 {
		t.Fatalf("spindle get of the damaged key: %v (%s), want exit status 5", err, out)
	}
	cmd = exec.CommandContext(ctx, spindleBin, append([]string{"admin", "damaged", "--meta", s.MetaAddr()}, s.ClientArgs()...)...)
	if out, err := cmd.CombinedOutput(); err != nil || !bytes.Contains(out, []byte(bucket+"/"+lostKey)) {
		t.Fatalf("spindle admin damaged: %v: %s; want the key named", err, out)
	}

	// Deleting the key deletes the lost block: no damage is left.
	if err := kc.Delete(ctx, bucket, lostKey); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "no damage left once the key is deleted", func() (bool, error) {
		st, err := mc.Damaged(ctx)
		if err != nil {
			return false, err
		}
		return len(st.Lost) == 0 && len(st.Repairable) == 0 && len(st.Keys) == 0, nil
	})
	waitFor(t, ctx, "the container with 3 healthy replicas", func() (bool, error) {
		rs, err := mc.Replication(ctx)
		if err != nil {
			return false, err
		}
		cs, err := mc.Containers(ctx)
		if err != nil {
			return false, err
		}
		for _, c := range cs {
			if c.ID == victim.ID {
				return rs.UnderReplicated == 0 && rs.Unrecoverable == 0 && len(c.Replicas) == 3, nil
			}
		}
		return false, nil
	})
}

// TestReadThatMeetsDamageRepairsIt: with the scrubbers off, a get whose
// first replica of a CLOSED container's block is damaged returns the right
// bytes from another replica; that read alone found the damage (no
// scrubber runs), and the block is then repaired from a good replica.
func TestReadThatMeetsDamageRepairsIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	s := startServer(t, dir, func(c *Config) {
		c.Meta.ContainerSizeBytes = 2 << 20
		c.DatanodeArgs = append(c.DatanodeArgs, "--scrub-rate", "0")
	})
	defer testutil.CloseT(t, s)
	kc := keyClient(t, s)
	mc, cl := s.Meta(), s.Cluster()
	const bucket, size = "readdamage", 200 << 10
	if _, err := kc.CreateBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	for i := range 24 { // two pipelines: each container gets about half
		if _, err := kc.Put(ctx, bucket, fmt.Sprintf("k%02d", i), bytes.NewReader(value(i, size)), keyclient.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// k00's container is CLOSED (it filled first) on its 3 replicas.
	var ki metaapi.KeyInfo
	waitFor(t, ctx, "k00's container CLOSED on 3 replicas", func() (bool, error) {
		var err error
		if ki, err = mc.GetKey(ctx, bucket, "k00"); err != nil {
			return false, err
		}
		cs, err := mc.Containers(ctx)
		if err != nil {
			return false, err
		}
		for _, c := range cs {
			if c.ID == ki.Blocks[0].Container {
				return c.State == metaapi.ContainerClosed && len(c.Replicas) == 3, nil
			}
		}
		return false, nil
	})
	b := ki.Blocks[0]
	first := cl.Node(b.Members[0].Addr) // the replica a get reads first
	other := cl.Node(b.Members[1].Addr)
	if first == nil || other == nil {
		t.Fatalf("replicas %+v not in the cluster", b.Members)
	}
	good := blockFileBytes(t, other.DataDir, b.BlockRef)
	flipBlockByte(t, first.DataDir, b.BlockRef, 4321)
	got, err := getErr(ctx, kc, bucket, "k00")
	if err != nil || !bytes.Equal(got, value(0, size)) {
		t.Fatalf("get with its first replica damaged: %v (or wrong bytes)", err)
	}
	waitFor(t, ctx, "the block the read found damaged repaired", func() (bool, error) {
		st, err := mc.Damaged(ctx)
		if err != nil {
			return false, err
		}
		return st.RepairedBlocks >= 1 && len(st.Repairable) == 0, nil
	})
	if !bytes.Equal(blockFileBytes(t, first.DataDir, b.BlockRef), good) {
		t.Fatal("the repaired block file does not hold the good replica's bytes")
	}
	st, err := mc.Damaged(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Scrub {
		if n.RateBytesPerS != 0 || n.ScannedBytes != 0 {
			t.Fatalf("a scrubber ran with --scrub-rate 0: %+v", n)
		}
	}
}
