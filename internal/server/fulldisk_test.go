package server

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/testutil"

	"golang.org/x/sys/unix"

	"github.com/spindle-store/spindle/internal/keyclient"
)

// TestFullDatanode is issue 12's full-disk acceptance, run by
// `make check-full-disk` (it mounts a tmpfs: root only, so it runs only
// with SPINDLE_TEST_TMPFS=1): 5 datanodes, datanode 1's volume on a
// 200 MiB tmpfs. Puts that would fill it go elsewhere or are refused with
// a clear error; the full datanode stays up; with any one of the other
// datanodes stopped, every acknowledged key reads back byte for byte; and
// the full datanode restarts on its full disk.
//
// Two ways: the meta service steers puts away from a node low on space
// (MinAvailableBytes, the default), and, with that steering off, the
// volume's own reserve refuses the writes that would fill it (the replica
// leaves its pipelines, which the meta service closes).
func TestFullDatanode(t *testing.T) {
	if os.Getenv("SPINDLE_TEST_TMPFS") != "1" {
		t.Skip("mounts a 200 MiB tmpfs: run with SPINDLE_TEST_TMPFS=1 as root (make check-full-disk)")
	}
	t.Run("meta steers", func(t *testing.T) { fullDatanode(t, 0) })
	t.Run("volume reserve", func(t *testing.T) { fullDatanode(t, 1) })
}

func fullDatanode(t *testing.T, minAvailableBytes uint64) {
	dir := t.TempDir()
	vol := filepath.Join(dir, "datanodes", "dn1")
	if err := os.MkdirAll(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=200m", "tmpfs", vol).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	defer func() {
		if out, err := exec.Command("umount", vol).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", vol, err, out)
		}
	}()
	s := startServer(t, dir, func(c *Config) {
		c.Datanodes = 5
		c.Meta.MinAvailableBytes = minAvailableBytes
	})
	defer testutil.CloseT(t, s)
	kc := keyClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := kc.CreateBucket(ctx, "data"); err != nil {
		t.Fatal(err)
	}
	const writers, keys, size = 4, 400, 1 << 20 // 400 MiB × 3 replicas over 5 nodes: ~240 MiB each
	var (
		mu      sync.Mutex
		acked   = map[string]int{}
		refused = map[string]int{}
		next    atomic.Int64
		wg      sync.WaitGroup
	)
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1))
				if i > keys || ctx.Err() != nil {
					return
				}
				key := fmt.Sprintf("k%04d", i)
				_, err := kc.Put(ctx, "data", key, bytes.NewReader(value(i, size)), keyclient.PutOptions{})
				mu.Lock()
				if err != nil {
					refused[err.Error()]++
				} else {
					acked[key] = i
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("%d of %d puts acknowledged; refusals: %v", len(acked), keys, refused)
	if len(acked) < keys/2 {
		t.Fatalf("only %d of %d puts acknowledged: the full datanode should make puts go elsewhere", len(acked), keys)
	}
	cl := s.Cluster()
	if !cl.Running(1) {
		t.Fatalf("the full datanode exited: %s", cl.ExitStatus(1))
	}
	var st unix.Statfs_t
	if err := unix.Statfs(vol, &st); err == nil {
		t.Logf("datanode 1's volume: %d of %d MiB free", st.Bavail*uint64(st.Bsize)>>20, st.Blocks*uint64(st.Bsize)>>20)
	}
	readAll := func(what string) {
		t.Helper()
		for key, i := range acked {
			got, err := getErr(ctx, kc, "data", key)
			if err != nil {
				t.Fatalf("%s: key %s: %v", what, key, err)
			}
			if !bytes.Equal(got, value(i, size)) {
				t.Fatalf("%s: key %s reads back wrong", what, key)
			}
		}
	}
	for id := 2; id <= 5; id++ {
		if err := cl.Kill(id); err != nil {
			t.Fatal(err)
		}
		readAll(fmt.Sprintf("datanode %d stopped", id))
		if err := cl.Restart(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	// The full datanode restarts on its full disk.
	if err := cl.Kill(1); err != nil {
		t.Fatal(err)
	}
	if err := cl.Restart(ctx, 1); err != nil {
		t.Fatalf("the full datanode does not restart: %v", err)
	}
	logb, _ := os.ReadFile(cl.Nodes()[0].LogPath)
	full := strings.Contains(string(logb), "volume is full") || strings.Contains(string(logb), "volume full")
	t.Logf("datanode 1 restarted on its volume; full-volume message in its log: %v", full)
	readAll("after the full datanode's restart")
}

func getErr(ctx context.Context, kc *keyclient.Client, bucket, key string) ([]byte, error) {
	var b bytes.Buffer
	if _, err := kc.Get(ctx, bucket, key, &b, keyclient.GetOptions{}); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
