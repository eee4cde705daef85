package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spindle-store/spindle/internal/bench"
)

// Queue-directory bench (seed 003): senders create files in D queue
// directories as a mail transfer agent queues messages, and the time of
// every system call is measured in-process.
//
// One file, as sendmail queues a message (tf = temporary file, qf = queue
// file), each step one system call timed on its own:
//
//	openat(O_WRONLY|O_CREAT|O_EXCL) dir/tfN  -> write(size bytes) -> fsync
//	-> close -> renameat(dir/tfN, dir/qfN) -> [unlinkat(dir/qfN)]
//
// Directory choice: round-robin over the global file sequence: file N goes
// to directory N mod D, whichever sender writes it.
//
// Layout: PATH/spindle-queue-dirs-*/q000 .. q<D-1>; the run directory is
// removed at the end (also on error or interruption), and PATH too when the
// bench created it.

// Queue-dirs defaults and limits.
const (
	DefaultQueueFileSizeBytes = 4096
	// MaxQueueDirs bounds --dirs.
	MaxQueueDirs = 1024
	// MaxQueueFileSizeBytes bounds --size (one payload buffer per sender).
	MaxQueueFileSizeBytes = 64 << 20
	// MaxQueueFiles bounds --files, and is the file bound of a run bounded
	// by duration only.
	MaxQueueFiles = 1 << 24
	// MaxQueueDiskBytes bounds the bytes a run without --unlink leaves on
	// disk until its cleanup: files × size.
	MaxQueueDiskBytes = 16 << 30
	// maxQueueSyscallAttempts bounds retries of one call on EINTR, and of
	// short writes.
	maxQueueSyscallAttempts = 64
)

// The system calls of one queued file, in call order; names are those
// strace prints for them on Linux.
const (
	qOpen = iota
	qWrite
	qFsync
	qClose
	qRename
	qUnlink
	qKinds
)

var queueSyscallNames = [qKinds]string{"openat", "write", "fsync", "close", "renameat", "unlinkat"}

// QueueDirsConfig configures RunQueueDirs.
type QueueDirsConfig struct {
	// Dir (PATH) is where the bench makes its run directory; created when
	// missing (and then removed at the end); "" means the system's
	// temporary directory.
	Dir string
	// Senders is the number of concurrent senders (default 1).
	Senders int
	// Dirs is the number of queue directories (default 1).
	Dirs int
	// Files and Duration bound the run; it stops at whichever comes first.
	// At least one must be positive; Files <= MaxQueueFiles.
	Files    int64
	Duration time.Duration
	// SizeBytes is the size of each file (default 4096).
	SizeBytes int64
	// Unlink removes each queue file right after its rename, as delivery
	// would; otherwise the files stay until the end of the run.
	Unlink bool
	// Progress is as in bench.LoopConfig (nil: stderr when a terminal).
	Progress io.Writer

	keepFiles bool // tests: leave the run directory in place
}

// QueueSyscall is the in-process timing of one kind of system call. Its JSON
// keys follow the per-syscall figures of report runs (calls, errors,
// seconds, usecs_per_call, percent_time) plus latency percentiles.
type QueueSyscall struct {
	Name         string               `json:"-"`
	Calls        int64                `json:"calls"`
	Errors       int64                `json:"errors"`
	Seconds      float64              `json:"seconds"`        // summed over senders
	UsecsPerCall float64              `json:"usecs_per_call"` // exact mean
	PercentTime  float64              `json:"percent_time"`   // share of the time in all timed calls
	LatencyUs    bench.LatencySummary `json:"latency_us"`
}

// QueueDirsResult is the outcome of RunQueueDirs. Result.Extra carries the
// same breakdown for JSON: "syscalls" {name: QueueSyscall} and the rest.
type QueueDirsResult struct {
	bench.Result
	// Syscalls in call order: openat, write, fsync, close, renameat,
	// unlinkat (the last only with Unlink).
	Syscalls []QueueSyscall
	// QueueFilesFound is the number of queue files the final check found
	// (files renamed and not unlinked); temporary files are never left.
	QueueFilesFound int64
	// RunDir is the run directory (removed when RunQueueDirs returns).
	RunDir string
}

func (c *QueueDirsConfig) defaults() error {
	if c.Senders == 0 {
		c.Senders = 1
	}
	if c.Dirs == 0 {
		c.Dirs = 1
	}
	if c.SizeBytes == 0 {
		c.SizeBytes = DefaultQueueFileSizeBytes
	}
	switch {
	case c.Senders < 1 || c.Senders > bench.MaxWorkers:
		return fmt.Errorf("senders %d not in [1, %d]", c.Senders, bench.MaxWorkers)
	case c.Dirs < 1 || c.Dirs > MaxQueueDirs:
		return fmt.Errorf("dirs %d not in [1, %d]", c.Dirs, MaxQueueDirs)
	case c.SizeBytes < 1 || c.SizeBytes > MaxQueueFileSizeBytes:
		return fmt.Errorf("size %d bytes not in [1, %d]", c.SizeBytes, MaxQueueFileSizeBytes)
	case c.Files < 0 || c.Duration < 0:
		return fmt.Errorf("negative bound (files %d, duration %v)", c.Files, c.Duration)
	case c.Files == 0 && c.Duration == 0:
		return errors.New("no bound: give a number of files, a duration, or both")
	case c.Files > MaxQueueFiles:
		return fmt.Errorf("files %d above the limit %d", c.Files, MaxQueueFiles)
	case !c.Unlink && c.Files > 0 && c.Files > MaxQueueDiskBytes/c.SizeBytes:
		return fmt.Errorf("files × size = %d × %d bytes above the %d-byte disk limit (add --unlink, or fewer or smaller files)", c.Files, c.SizeBytes, int64(MaxQueueDiskBytes))
	}
	return nil
}

// maxFiles is the file bound of the run: Files, or the limit implied by
// MaxQueueFiles and MaxQueueDiskBytes for a run bounded by duration only.
func (c *QueueDirsConfig) maxFiles() int64 {
	if c.Files > 0 {
		return c.Files
	}
	if c.Unlink {
		return MaxQueueFiles
	}
	return min(MaxQueueFiles, MaxQueueDiskBytes/c.SizeBytes)
}

// queueSender is one sender's state; touched by its goroutine only until
// the loop has returned.
type queueSender struct {
	id    int
	buf   []byte
	calls [qKinds]int64
	nanos [qKinds]int64
	lat   [qKinds]*bench.Latency
}

func (s *queueSender) record(kind int, d time.Duration) {
	s.calls[kind]++
	s.nanos[kind] += int64(d)
	s.lat[kind].Record(d)
}

// RunQueueDirs runs the queue-directory bench (see the comment at the top
// of this file). On error or interruption it returns what was measured so
// far with the error; the files are removed in every case.
func RunQueueDirs(ctx context.Context, cfg QueueDirsConfig) (res QueueDirsResult, err error) {
	if err := cfg.defaults(); err != nil {
		return QueueDirsResult{}, fmt.Errorf("queue-dirs: %w", err)
	}
	base, removeBase, err := queueBaseDir(cfg.Dir)
	if err != nil {
		return QueueDirsResult{}, err
	}
	runDir, err := os.MkdirTemp(base, "spindle-queue-dirs-")
	if err != nil {
		err = fmt.Errorf("queue-dirs: create run directory in %s: %w", base, err)
		if removeBase {
			err = errors.Join(err, queueRemoveDir(base))
		}
		return QueueDirsResult{}, err
	}
	res.RunDir = runDir
	defer func() {
		if cfg.keepFiles {
			return
		}
		if rerr := os.RemoveAll(runDir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("queue-dirs: clean up %s: %w", runDir, rerr))
		}
		if removeBase {
			err = errors.Join(err, queueRemoveDir(base))
		}
	}()
	dirs := make([]string, cfg.Dirs)
	for i := range dirs {
		dirs[i] = filepath.Join(runDir, fmt.Sprintf("q%03d", i))
		if err := os.Mkdir(dirs[i], 0o755); err != nil {
			return res, fmt.Errorf("queue-dirs: create queue directory: %w", err)
		}
	}
	senders := make([]*queueSender, cfg.Senders)
	for i := range senders {
		s := &queueSender{id: i, buf: make([]byte, cfg.SizeBytes)}
		rng := rand.New(rand.NewPCG(uint64(i)+1, 0x5155455545)) // "QUEUE"
		for j := range s.buf {
			s.buf[j] = byte(rng.IntN(255)) + 1 // never zero
		}
		for k := range s.lat {
			s.lat[k] = bench.NewLatency()
		}
		senders[i] = s
	}

	var seq atomic.Int64 // the global file sequence: file N goes to dirs[N % D]
	st, loopErr := bench.Loop(ctx, bench.LoopConfig{
		Workers: cfg.Senders, Duration: cfg.Duration, MaxOps: cfg.maxFiles(),
		Label: "queue-dirs", Progress: cfg.Progress,
	}, func(_ context.Context, worker int, _ int64) (int, error) {
		n := seq.Add(1) - 1
		return senders[worker].queueOne(dirs[n%int64(len(dirs))], n, cfg.Unlink)
	})

	// The loop has returned: every sender goroutine has stopped.
	res.Result = st.Result("queue-dirs")
	res.Syscalls = summarizeQueue(senders, cfg.Unlink)
	if loopErr == nil {
		res.QueueFilesFound, err = checkQueueDirs(dirs, res.Syscalls)
	}
	res.describe(cfg, base, st)
	if loopErr != nil {
		return res, fmt.Errorf("queue-dirs in %s: %w", runDir, loopErr)
	}
	return res, err
}

// queueOne queues file n in dir: each system call timed on its own.
func (s *queueSender) queueOne(dir string, n int64, unlink bool) (int, error) {
	id := strconv.FormatInt(n, 10)
	tf := filepath.Join(dir, "tf"+id)
	qf := filepath.Join(dir, "qf"+id)

	t0 := time.Now()
	fd, err := queueOpen(tf)
	t1 := time.Now()
	if err != nil {
		return 0, fmt.Errorf("sender %d: openat %s: %w", s.id, tf, err)
	}
	s.record(qOpen, t1.Sub(t0))
	fail := func(err error) (int, error) {
		_ = unix.Close(fd) // already failing; the run directory is removed at the end
		return 0, err
	}
	b := s.buf
	for attempt := 0; len(b) > 0; attempt++ {
		if attempt == maxQueueSyscallAttempts {
			return fail(fmt.Errorf("sender %d: write %s: %d bytes left after %d calls: %w", s.id, tf, len(b), attempt, io.ErrShortWrite))
		}
		t0 = time.Now()
		w, err := unix.Write(fd, b)
		t1 = time.Now()
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fail(fmt.Errorf("sender %d: write %s: %w", s.id, tf, err))
		}
		s.record(qWrite, t1.Sub(t0))
		b = b[w:]
	}
	t0 = time.Now()
	err = queueRetryEINTR(func() error { return unix.Fsync(fd) })
	t1 = time.Now()
	if err != nil {
		return fail(fmt.Errorf("sender %d: fsync %s: %w", s.id, tf, err))
	}
	s.record(qFsync, t1.Sub(t0))
	t0 = time.Now()
	err = unix.Close(fd) // never retried: the descriptor is gone either way
	t1 = time.Now()
	if err != nil {
		return 0, fmt.Errorf("sender %d: close %s: %w", s.id, tf, err)
	}
	s.record(qClose, t1.Sub(t0))
	t0 = time.Now()
	err = queueRetryEINTR(func() error { return unix.Rename(tf, qf) })
	t1 = time.Now()
	if err != nil {
		return 0, fmt.Errorf("sender %d: renameat %s to %s: %w", s.id, tf, qf, err)
	}
	s.record(qRename, t1.Sub(t0))
	if unlink {
		t0 = time.Now()
		err = queueRetryEINTR(func() error { return unix.Unlink(qf) })
		t1 = time.Now()
		if err != nil {
			return 0, fmt.Errorf("sender %d: unlinkat %s: %w", s.id, qf, err)
		}
		s.record(qUnlink, t1.Sub(t0))
	}
	return len(s.buf), nil
}

func queueOpen(path string) (int, error) {
	var fd int
	err := queueRetryEINTR(func() error {
		var err error
		fd, err = unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
		return err
	})
	return fd, err
}

// queueRetryEINTR calls fn until it returns anything but EINTR, at most
// maxQueueSyscallAttempts times.
func queueRetryEINTR(fn func() error) error {
	var err error
	for range maxQueueSyscallAttempts {
		if err = fn(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
	return err
}

// summarizeQueue merges the senders' figures per system call.
func summarizeQueue(senders []*queueSender, unlink bool) []QueueSyscall {
	kinds := qKinds
	if !unlink {
		kinds = qUnlink
	}
	var allNanos int64
	for _, s := range senders {
		for k := range kinds {
			allNanos += s.nanos[k]
		}
	}
	out := make([]QueueSyscall, kinds)
	for k := range kinds {
		lat := bench.NewLatency()
		var nanos int64
		q := QueueSyscall{Name: queueSyscallNames[k]}
		for _, s := range senders {
			q.Calls += s.calls[k]
			nanos += s.nanos[k]
			lat.Merge(s.lat[k])
		}
		q.Seconds = queueRound(float64(nanos)/1e9, 1e6)
		if q.Calls > 0 {
			q.UsecsPerCall = queueRound(float64(nanos)/1e3/float64(q.Calls), 1e3)
		}
		if allNanos > 0 {
			q.PercentTime = queueRound(100*float64(nanos)/float64(allNanos), 1e2)
		}
		q.LatencyUs = lat.Summary()
		out[k] = q
	}
	return out
}

func queueRound(x, scale float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return math.Round(x*scale) / scale
}

// checkQueueDirs lists the queue directories after a run that ended without
// error: no temporary file may be left, and every renamed file that was not
// unlinked must be there. It returns the number of queue files found.
func checkQueueDirs(dirs []string, calls []QueueSyscall) (int64, error) {
	var qf, tf, other int64
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			return 0, fmt.Errorf("queue-dirs: check %s: %w", d, err)
		}
		for _, e := range entries {
			switch {
			case strings.HasPrefix(e.Name(), "qf"):
				qf++
			case strings.HasPrefix(e.Name(), "tf"):
				tf++
			default:
				other++
			}
		}
	}
	want := calls[qRename].Calls
	if len(calls) > qUnlink {
		want -= calls[qUnlink].Calls
	}
	if qf != want || tf != 0 || other != 0 {
		return qf, fmt.Errorf("queue-dirs: check: %d queue files, %d temporary files and %d others in the queue directories, want %d, 0 and 0", qf, tf, other, want)
	}
	return qf, nil
}

// describe fills params and extra of the result.
func (res *QueueDirsResult) describe(cfg QueueDirsConfig, base string, st bench.Stats) {
	r := &res.Result
	r.SetParam("dir", base)
	r.SetParam("senders", cfg.Senders)
	r.SetParam("dirs", cfg.Dirs)
	r.SetParam("files", cfg.Files)
	r.SetParam("duration", cfg.Duration.String())
	r.SetParam("size_bytes", cfg.SizeBytes)
	r.SetParam("unlink", cfg.Unlink)
	r.SetParam("dir_assignment", "round-robin")
	byName := make(map[string]QueueSyscall, len(res.Syscalls))
	var perFileUs float64
	for _, q := range res.Syscalls {
		byName[q.Name] = q
		if st.Ops > 0 {
			perFileUs += q.Seconds * 1e6 / float64(st.Ops)
		}
	}
	r.Extra = map[string]any{
		"files":               st.Ops,
		"files_per_s":         r.OpsPerS,
		"syscalls":            byName,
		"syscall_us_per_file": queueRound(perFileUs, 1e3),
		"queue_files_found":   res.QueueFilesFound,
		"syscall_order":       queueSyscallOrder(res.Syscalls),
	}
}

func queueSyscallOrder(qs []QueueSyscall) []string {
	out := make([]string, len(qs))
	for i, q := range qs {
		out[i] = q.Name
	}
	return out
}

// WriteTable prints the bench row, then one row per system call.
func (res QueueDirsResult) WriteTable(w io.Writer) error {
	if err := res.Result.WriteTable(w); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "syscall\tcalls\tseconds\tavg µs\tp50 µs\tp99 µs\tmax µs\t% time\t")
	for _, q := range res.Syscalls {
		fmt.Fprintf(tw, "%s\t%d\t%.6f\t%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t\n",
			q.Name, q.Calls, q.Seconds, q.UsecsPerCall, q.LatencyUs.P50, q.LatencyUs.P99, q.LatencyUs.Max, q.PercentTime)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("queue-dirs: write table: %w", err)
	}
	return nil
}

// queueBaseDir returns PATH and whether the bench created it.
func queueBaseDir(dir string) (string, bool, error) {
	if dir == "" {
		return os.TempDir(), false, nil
	}
	fi, err := os.Stat(dir)
	switch {
	case err == nil && fi.IsDir():
		return dir, false, nil
	case err == nil:
		return "", false, fmt.Errorf("queue-dirs: %s is not a directory", dir)
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", false, fmt.Errorf("queue-dirs: create %s: %w", dir, err)
		}
		return dir, true, nil
	default:
		return "", false, fmt.Errorf("queue-dirs: %w", err)
	}
}

func queueRemoveDir(dir string) error {
	if err := os.Remove(dir); err != nil {
		return fmt.Errorf("queue-dirs: remove %s: %w", dir, err)
	}
	return nil
}
