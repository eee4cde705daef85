package localcluster_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/client"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/localcluster"
	"github.com/spindle-store/spindle/internal/transport"
)

// spindleBin is the spindle binary built once for every test.
var spindleBin string

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	dir, err := os.MkdirTemp("", "spindle-localcluster-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { code = atExit(code, "removing the test directory", os.RemoveAll(dir)) }()
	spindleBin = filepath.Join(dir, "spindle")
	// go test puts its own GOROOT/bin first on the PATH of the tests.
	gobin := "go"
	cmd := exec.Command(gobin, "build", "-o", spindleBin, "github.com/spindle-store/spindle/cmd/spindle")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building spindle: %v\n", err)
		return 1
	}
	return m.Run()
}

// Bounds of the waits in these tests: generous, since a loaded 2-core
// machine runs them; what they measure is logged, not asserted.
const (
	leaderBound   = 30 * time.Second // a leader emerges
	catchUpBound  = 60 * time.Second // a replica holds everything acknowledged
	testTimeout   = 3 * time.Minute  // the whole test
	pollInterval  = 20 * time.Millisecond
	chunkBytes    = 4 << 10
	chunksPerBlk  = 8
	writers       = 4
	writesPerSide = 120 // acknowledged writes before a kill, and again after it
)

func startCluster(t *testing.T) (*localcluster.Cluster, *client.Client, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	root := t.TempDir()
	cl, err := localcluster.Start(ctx, localcluster.Config{
		Binary: spindleBin, DataDir: filepath.Join(root, "data"), LogDir: filepath.Join(root, "log"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cl.Stop(20 * time.Second); err != nil {
			t.Errorf("stop: %v", err)
		}
		if t.Failed() {
			t.Logf("datanode logs:\n%s", cl.Logs())
		}
	})
	c, err := client.New(cl.Addrs(), cl.PipelineID(), client.Options{
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		RetryTimeout: leaderBound,
		MaxAttempts:  1000,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("client close: %v", err)
		}
	})
	return cl, c, ctx
}

// ack is one acknowledged chunk write.
type ack struct {
	b    client.BlockID
	off  uint64
	data []byte
	sums []uint32
	at   time.Time
	// leader is the client's leader right after the acknowledgement:
	// the member that acknowledged it, unless another writer changed it
	// meanwhile.
	leader string
}

// load is a set of writers, each writing its own blocks sequentially
// (chunksPerBlk chunks, then PutBlock) until stopped or failed.
type load struct {
	c      *client.Client
	mu     sync.Mutex
	acks   []ack
	blocks []transport.BlockData // committed
	err    error
	stop   chan struct{}
	wg     sync.WaitGroup
}

func startLoad(ctx context.Context, c *client.Client, n int) *load {
	l := &load{c: c, stop: make(chan struct{})}
	for w := range n {
		l.wg.Add(1)
		go l.writer(ctx, w)
	}
	return l
}

func (l *load) writer(ctx context.Context, w int) {
	defer l.wg.Done()
	seq := uint64(0)
	for blk := uint64(1); ; blk++ {
		id := client.BlockID{Container: uint64(1 + w%2), Local: uint64(w)<<32 | blk}
		bd := transport.BlockData{ContainerID: id.Container, LocalID: id.Local, BytesPerChecksum: engine.DefaultBytesPerChecksum}
		for i := range chunksPerBlk {
			select {
			case <-l.stop:
				return
			default:
			}
			seq++
			data := make([]byte, chunkBytes)
			bench.FillPseudoRandom(data, uint64(w)<<40|seq)
			off := uint64(i * chunkBytes)
			ci, err := l.c.WriteChunk(ctx, id, off, data)
			if err != nil {
				l.fail(fmt.Errorf("writer %d: %w", w, err))
				return
			}
			l.mu.Lock()
			l.acks = append(l.acks, ack{b: id, off: off, data: data, sums: ci.Checksums, at: time.Now(), leader: l.c.Leader()})
			l.mu.Unlock()
			bd.Chunks = append(bd.Chunks, ci)
			bd.Length += ci.Length
		}
		if err := l.c.PutBlock(ctx, bd, ""); err != nil {
			l.fail(fmt.Errorf("writer %d: PutBlock %v: %w", w, id, err))
			return
		}
		l.mu.Lock()
		l.blocks = append(l.blocks, bd)
		l.mu.Unlock()
	}
}

func (l *load) fail(err error) {
	l.mu.Lock()
	if l.err == nil {
		l.err = err
	}
	l.mu.Unlock()
}

// waitAcks waits (bounded) until n writes were acknowledged after since,
// and returns the time of the first.
func (l *load) waitAcks(t *testing.T, since time.Time, n int, bound time.Duration) time.Time {
	t.Helper()
	return l.waitAcksFrom(t, since, "", n, bound)
}

// waitAcksFrom is waitAcks counting only acknowledgements from leaders
// other than notFrom.
func (l *load) waitAcksFrom(t *testing.T, since time.Time, notFrom string, n int, bound time.Duration) time.Time {
	t.Helper()
	var first time.Time
	err := poll(bound, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.err != nil {
			return l.err
		}
		k := 0
		for _, a := range l.acks {
			if a.at.After(since) && (notFrom == "" || a.leader != notFrom) {
				if k == 0 {
					first = a.at
				}
				k++
			}
		}
		if k < n {
			return fmt.Errorf("%d of %d writes acknowledged since %v", k, n, since.Format(time.StampMicro))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return first
}

func (l *load) finish(t *testing.T) ([]ack, []transport.BlockData) {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	if l.err != nil {
		t.Fatal(l.err)
	}
	return l.acks, l.blocks
}

// errFatal stops a poll at once.
type errFatal struct{ error }

// poll calls fn until it returns nil or bound passes (then its last error).
func poll(bound time.Duration, fn func() error) error {
	deadline := time.Now().Add(bound)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		err := fn()
		if err == nil {
			return nil
		}
		var fatal errFatal
		if errors.As(err, &fatal) {
			return fatal.error
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v: %w", bound, err)
		}
		<-tick.C
	}
}

// verifyReplica checks, polling while the replica catches up, that every
// acknowledged write reads back from the member at addr with the bytes and
// checksums written, and every committed block's metadata is there.
func verifyReplica(t *testing.T, ctx context.Context, c *client.Client, addr string, acks []ack, blocks []transport.BlockData) {
	t.Helper()
	start := time.Now()
	next := 0
	err := poll(catchUpBound, func() error {
		for ; next < len(acks); next++ {
			a := acks[next]
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			ch, err := c.ReadChunk(rctx, addr, a.b, a.off, uint64(len(a.data)))
			cancel()
			if err != nil {
				if errors.Is(err, client.ErrCorrupt) {
					return errFatal{err}
				}
				return fmt.Errorf("chunk %v@%d: %w", a.b, a.off, err)
			}
			if !bytes.Equal(ch.Data, a.data) {
				return errFatal{fmt.Errorf("chunk %v@%d from %s: bytes differ from those acknowledged", a.b, a.off, addr)}
			}
			if got := engine.ComputeChecksums(nil, ch.Data, engine.DefaultBytesPerChecksum); !slices.Equal(got, a.sums) {
				return errFatal{fmt.Errorf("chunk %v@%d from %s: checksums %x, written %x", a.b, a.off, addr, got, a.sums)}
			}
		}
		for _, bd := range blocks {
			id := client.BlockID{Container: bd.ContainerID, Local: bd.LocalID}
			got, err := c.GetBlock(ctx, addr, id)
			if err != nil {
				return fmt.Errorf("block %v: %w", id, err)
			}
			if got.Length != bd.Length || len(got.Chunks) != len(bd.Chunks) {
				return errFatal{fmt.Errorf("block %v from %s: length %d in %d chunks, committed %d in %d", id, addr, got.Length, len(got.Chunks), bd.Length, len(bd.Chunks))}
			}
			for i := range bd.Chunks {
				if !slices.Equal(got.Chunks[i].Checksums, bd.Chunks[i].Checksums) {
					return errFatal{fmt.Errorf("block %v from %s: chunk %d checksums differ", id, addr, i)}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("replica %s: %v", addr, err)
	}
	t.Logf("replica %s: %d chunks and %d blocks read back and verified in %v", addr, len(acks), len(blocks), time.Since(start).Round(time.Millisecond))
}

func TestPipelineTakesWrites(t *testing.T) {
	cl, c, ctx := startCluster(t)
	l := startLoad(ctx, c, writers)
	l.waitAcks(t, time.Time{}, writesPerSide, leaderBound)
	acks, blocks := l.finish(t)
	if len(blocks) == 0 {
		t.Fatal("no block committed")
	}
	for _, addr := range cl.Addrs() {
		verifyReplica(t, ctx, c, addr, acks, blocks)
	}
	// A read of a range never written is NotFound, not zeros.
	_, err := c.ReadChunk(ctx, cl.Addrs()[0], client.BlockID{Container: 1, Local: 1 << 62}, 0, 10)
	var se *transport.StatusError
	if !errors.As(err, &se) || se.Status != transport.StatusNotFound {
		t.Fatalf("read of an unknown block: %v, want NotFound", err)
	}
}

func TestLeaderKilledMidStream(t *testing.T) {
	cl, c, ctx := startCluster(t)
	l := startLoad(ctx, c, writers)
	l.waitAcks(t, time.Time{}, writesPerSide, leaderBound)

	leaderAddr := c.Leader()
	old := cl.Node(leaderAddr)
	if old == nil {
		t.Fatalf("leader %q is not a member of %v", leaderAddr, cl.Addrs())
	}
	l.mu.Lock()
	before := len(l.acks)
	l.mu.Unlock()
	if err := cl.Kill(old.ID); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now() // the old leader is dead and reaped
	// Writes resume once a new leader is elected: the first write
	// acknowledged by another member after the kill measures the
	// failover as a client sees it.
	first := l.waitAcksFrom(t, killedAt, leaderAddr, 1, leaderBound)
	failover := first.Sub(killedAt)
	newLeader := c.Leader()
	t.Logf("leader %s (member %d) killed with %d writes acknowledged; writes resumed after %v at new leader %s",
		leaderAddr, old.ID, before, failover.Round(time.Millisecond), newLeader)
	if failover > 5*time.Second {
		t.Logf("NOTE: failover took %v, over the 5 s target (a loaded machine?)", failover.Round(time.Millisecond))
	}
	if newLeader == leaderAddr || newLeader == "" {
		t.Fatalf("writes resumed, but the client's leader is %q", newLeader)
	}
	l.waitAcks(t, killedAt, writesPerSide, leaderBound)
	acks, blocks := l.finish(t)

	// Every acknowledged write, before the kill and after, reads back
	// from every surviving replica.
	for _, n := range cl.Nodes() {
		if n.ID != old.ID {
			verifyReplica(t, ctx, c, n.Addr, acks, blocks)
		}
	}
	if before == 0 || len(acks) <= before {
		t.Fatalf("acknowledged %d writes before the kill and %d in all", before, len(acks))
	}
}

func TestFollowerRestartCatchesUp(t *testing.T) {
	cl, c, ctx := startCluster(t)
	l := startLoad(ctx, c, writers)
	l.waitAcks(t, time.Time{}, writesPerSide/2, leaderBound)

	var follower *localcluster.Node
	for _, n := range cl.Nodes() {
		if n.Addr != c.Leader() {
			follower = n
			break
		}
	}
	killedAt := time.Now()
	if err := cl.Kill(follower.ID); err != nil {
		t.Fatal(err)
	}
	// The two others keep the quorum: writes go on while it is down.
	l.waitAcks(t, killedAt, writesPerSide, leaderBound)
	if err := cl.Restart(ctx, follower.ID); err != nil {
		t.Fatal(err)
	}
	restartedAt := time.Now()
	l.waitAcks(t, restartedAt, writesPerSide/2, leaderBound)
	acks, blocks := l.finish(t)
	t.Logf("follower %s killed, restarted after %v; %d writes acknowledged in all", follower.Addr, restartedAt.Sub(killedAt).Round(time.Millisecond), len(acks))

	// It reads back everything, including what was written while it was
	// down, once it has caught up.
	verifyReplica(t, ctx, c, follower.Addr, acks, blocks)
	for _, n := range cl.Nodes() {
		if n.ID != follower.ID {
			verifyReplica(t, ctx, c, n.Addr, acks, blocks)
		}
	}
}

// procState is the state letter of /proc/PID/stat ('T': stopped).
func procState(pid int) (byte, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')') // the command name may hold spaces
	if i < 0 || i+2 >= len(b) {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	return b[i+2], nil
}

// TestProcessGroupPauseResume: with ProcessGroup a member leads its own
// process group; Pause stops it, Resume continues it, and Stop ends a
// paused member with SIGTERM (it sends SIGCONT first), not SIGKILL.
func TestProcessGroupPauseResume(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	root := t.TempDir()
	cl, err := localcluster.Start(ctx, localcluster.Config{
		Binary: spindleBin, Members: 1, DataDir: filepath.Join(root, "data"), LogDir: filepath.Join(root, "log"),
		ProcessGroup: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			if err := cl.Stop(20 * time.Second); err != nil {
				t.Errorf("stop: %v", err)
			}
		}
	}()
	pid := cl.PID(1)
	if pgid, err := syscall.Getpgid(pid); err != nil || pgid != pid {
		t.Fatalf("member's process group %d (%v), want its own, %d", pgid, err, pid)
	}
	if pgid, _ := syscall.Getpgid(os.Getpid()); pgid == pid {
		t.Fatal("the test runs in the member's group")
	}
	waitState := func(want func(byte) bool, what string) {
		t.Helper()
		if err := poll(leaderBound, func() error {
			st, err := procState(pid)
			if err != nil {
				return err
			}
			if !want(st) {
				return fmt.Errorf("state %c, want %s", st, what)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.Pause(1); err != nil {
		t.Fatal(err)
	}
	waitState(func(s byte) bool { return s == 'T' }, "stopped")
	if err := cl.Resume(1); err != nil {
		t.Fatal(err)
	}
	waitState(func(s byte) bool { return s != 'T' }, "running")
	if err := cl.Pause(1); err != nil {
		t.Fatal(err)
	}
	waitState(func(s byte) bool { return s == 'T' }, "stopped")
	stopped = true
	if err := cl.Stop(20 * time.Second); err != nil {
		t.Fatalf("stop of a paused member: %v", err)
	}
	if st := cl.ExitStatus(1); strings.Contains(st, "killed") {
		t.Fatalf("the paused member was killed (%s), not stopped by SIGTERM", st)
	}
}
