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
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/testutil"

	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// TestVolumeRemovedUnderARunningDatanode is issue 15's failed-volume
// acceptance: datanode 1 has two volumes; the second is removed (rm -rf)
// while it runs. Its probe fails the volume, the containers it held are
// no longer reported and are copied again until every CLOSED container
// has 3 replicas, datanode 1 keeps running and serving its first volume
// (its failed volume shown in GET /v1/nodes), and every key reads back
// with datanode 2 stopped.
//
// As root, a second run has the volume on a tmpfs that is unmounted (lazily:
// its open files stay usable, the directory shows the empty mount point);
// without the right to mount, that run is skipped.
func TestVolumeRemovedUnderARunningDatanode(t *testing.T) {
	t.Run("rm -rf", func(t *testing.T) {
		volumeLost(t, func(t *testing.T, dir string) {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, dir string) {
			// The running datanode may make a file in the directory while
			// it is being emptied (ENOTEMPTY, seen beside two busy
			// processes), as it would under an operator's rm -rf: remove
			// again, a bounded number of times.
			var err error
			for range 100 {
				if err = os.RemoveAll(dir); !errors.Is(err, syscall.ENOTEMPTY) {
					break
				}
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("umount", func(t *testing.T) {
		mounted := false
		volumeLost(t, func(t *testing.T, dir string) {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", dir).CombinedOutput(); err != nil {
				t.Skipf("cannot mount a tmpfs (root in a container without the right?): %v: %s", err, out)
			}
			mounted = true
			t.Cleanup(func() {
				if mounted {
					if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
						t.Errorf("umount %s: %v: %s", dir, err, out)
					}
				}
			})
		}, func(t *testing.T, dir string) {
			if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
				t.Fatalf("umount %s: %v: %s", dir, err, out)
			}
			mounted = false
		})
	})
}

// volumeLost runs the test with the second volume prepared by setup and
// lost by lose.
func volumeLost(t *testing.T, setup, lose func(t *testing.T, dir string)) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	second := filepath.Join(dir, "dn1-second-volume")
	setup(t, second)
	s := startServer(t, dir, func(c *Config) {
		c.Meta.ContainerSizeBytes = 2 << 20
		c.Meta.DeadAfter = 5 * time.Second
		c.Meta.StaleAfter = time.Second
		c.DatanodeArgs = append(c.DatanodeArgs, "--volume-check-interval", "200ms", "--scrub-rate", "0")
		c.DatanodeNodeArgs = func(id int) []string {
			if id == 1 {
				return []string{"--data-dir", second}
			}
			return nil
		}
	})
	defer testutil.CloseT(t, s)
	kc := keyClient(t, s)
	mc, cl := s.Meta(), s.Cluster()
	const bucket, size, keys = "volumes", 200 << 10, 30
	if _, err := kc.CreateBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		if _, err := kc.Put(ctx, bucket, fmt.Sprintf("k%02d", i), bytes.NewReader(value(i, size)), keyclient.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The CLOSED containers whose replica on datanode 1 is on the second
	// volume, once every replica of them is CLOSED.
	var lost []uint64
	waitFor(t, ctx, "CLOSED containers on the second volume", func() (bool, error) {
		cs, err := mc.Containers(ctx)
		if err != nil {
			return false, err
		}
		lost = lost[:0]
		for _, c := range cs {
			m, _ := filepath.Glob(filepath.Join(second, "containers", "*", strconv.FormatUint(c.ID, 10)))
			if len(m) == 0 || c.State != metaapi.ContainerClosed {
				continue
			}
			closed := 0
			for _, r := range c.ReplicaDetails {
				if r.State == metaapi.ContainerClosed {
					closed++
				}
			}
			if closed != 3 {
				return false, nil
			}
			lost = append(lost, c.ID)
		}
		return len(lost) > 0, nil
	})
	t.Logf("containers on the second volume: %v", lost)
	ps, err := mc.Pipelines(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lose(t, second)
	var node1 uint64
	waitFor(t, ctx, "the failed volume reported", func() (bool, error) {
		ns, err := mc.Nodes(ctx)
		if err != nil {
			return false, err
		}
		for _, n := range ns {
			if n.Addr == cl.Nodes()[0].Addr && len(n.FailedVolumes) == 1 && n.FailedVolumes[0].Dir == second {
				node1 = n.NodeID
				return true, nil
			}
		}
		return false, nil
	})
	waitFor(t, ctx, "the lost replicas copied again", func() (bool, error) {
		cs, err := mc.Containers(ctx)
		if err != nil {
			return false, err
		}
		rs, err := mc.Replication(ctx)
		if err != nil {
			return false, err
		}
		for _, c := range cs {
			for _, id := range lost {
				if c.ID == id && len(c.Replicas) != 3 {
					return false, nil
				}
			}
		}
		return rs.UnderReplicated == 0 && len(rs.Inflight) == 0 && rs.CopiedContainers >= uint64(len(lost)), nil
	})
	if !cl.Running(1) {
		t.Fatalf("datanode 1 stopped: %s", cl.ExitStatus(1))
	}
	// Its pipelines OPEN at the loss were closed (an OPEN container of
	// theirs may have been on the lost volume).
	now, err := mc.Pipelines(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.State != metaapi.PipelineOpen || !slices.ContainsFunc(p.Members, func(m metaapi.Member) bool { return m.NodeID == node1 }) {
			continue
		}
		for _, q := range now {
			if q.ID == p.ID && q.State != metaapi.PipelineClosed {
				t.Fatalf("pipeline %d of datanode 1 still %s after its volume failed", p.ID, q.State)
			}
		}
	}
	ns, err := mc.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		if n.NodeID == node1 && n.Health != metaapi.HealthHealthy {
			t.Fatalf("datanode 1 is %s", n.Health)
		}
	}
	// Every key reads back with datanode 2 stopped: datanode 1 serves its
	// first volume and the copies.
	if err := cl.Kill(2); err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		got, err := getErr(ctx, kc, bucket, fmt.Sprintf("k%02d", i))
		if err != nil || !bytes.Equal(got, value(i, size)) {
			t.Fatalf("key k%02d with datanode 2 stopped: %v (or wrong bytes)", i, err)
		}
	}
}
