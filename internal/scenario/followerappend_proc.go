package scenario

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spindle-store/spindle/internal/readyfile"
)

// Limits of the datanode child process.
const (
	// faReadyTimeout bounds the wait for the datanode's ready file.
	faReadyTimeout = 2 * time.Minute
	// faReadyPoll is the ready file's polling interval.
	faReadyPoll = 10 * time.Millisecond
	// faStopTimeout bounds the wait for the datanode (and strace, which
	// then writes its summary) to exit after SIGTERM.
	faStopTimeout = 2 * time.Minute
	// faKillTimeout bounds the wait after SIGKILL.
	faKillTimeout = 10 * time.Second
	// faLogTailLines is how much of the datanode's output an error quotes.
	faLogTailLines = 20
	// faElectionTicks keeps the follower's election timeout from firing
	// while the leader is busy (1000 ticks of 100 ms: 100 s).
	faElectionTicks = 1000
	faTickInterval  = 100 * time.Millisecond
)

// datanodeSpec is how to start the follower's datanode.
type datanodeSpec struct {
	Binary     string // the spindle binary
	DataDir    string
	LogDir     string
	LeaderAddr string // node 1 (and node 3): the fake leader's listener
	WorkDir    string // ready file, output, strace summary
	Name       string // file name prefix in WorkDir
	// Strace, when not empty, is the strace binary to run the datanode
	// under (strace -f -c -o StraceOut).
	Strace    string
	StraceOut string
}

// datanodeProc is a running datanode (possibly under strace).
type datanodeProc struct {
	cmd     *exec.Cmd
	pid     int    // the datanode's own pid (under strace, not cmd's)
	addr    string // where it listens
	logPath string
	done    chan struct{} // closed when cmd has exited; then waitErr is set
	waitErr error
}

// datanodeArgs is the datanode's command line (after the binary).
func datanodeArgs(s datanodeSpec, readyFile string) []string {
	// Nodes 1 and 3 both resolve to the fake leader: whatever the follower
	// sends lands with it. The follower's own address is where it listens.
	pipe := fmt.Sprintf("%d:%d=%s,%d=%s,%d=%s", faGroupID, faLeaderID, s.LeaderAddr, faFollowerID, "127.0.0.1:0", faOtherID, s.LeaderAddr)
	return []string{
		"datanode",
		"--id", strconv.Itoa(faFollowerID),
		"--listen", "127.0.0.1:0",
		"--data-dir", s.DataDir,
		"--log-dir", s.LogDir,
		"--pipeline", pipe,
		"--ready-file", readyFile,
		"--tick", faTickInterval.String(),
		"--election-ticks", strconv.Itoa(faElectionTicks),
		"--insecure", // the fake leader speaks plaintext: the bench measures the storage path
	}
}

// startDatanode starts the datanode and waits for its ready file.
func startDatanode(ctx context.Context, s datanodeSpec) (*datanodeProc, error) {
	readyFile := filepath.Join(s.WorkDir, s.Name+".ready")
	logPath := filepath.Join(s.WorkDir, s.Name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("datanode: output file: %w", err)
	}
	defer closeQuietly(logf) // the child holds its own descriptor
	argv := append([]string{s.Binary}, datanodeArgs(s, readyFile)...)
	if s.Strace != "" {
		argv = append([]string{s.Strace, "-f", "-c", "-o", s.StraceOut, "--"}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a Ctrl-C at the terminal reaches the bench,
	// which stops the datanode itself; and it dies with the bench.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Env = append(os.Environ(), "GOTRACEBACK=all")
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("datanode: start %s: %w", argv[0], err)
	}
	p := &datanodeProc{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	addr, pid, err := waitReady(ctx, readyFile, p.done)
	if err != nil {
		p.kill()
		return nil, fmt.Errorf("datanode (%s): %w%s", strings.Join(argv, " "), err, p.tail())
	}
	p.addr, p.pid = addr, pid
	return p, nil
}

// waitReady polls for the ready file ("ADDR\nPID\n", written atomically),
// at most faReadyTimeout, until done is closed or ctx ends.
func waitReady(ctx context.Context, path string, done <-chan struct{}) (string, int, error) {
	ticker := time.NewTicker(faReadyPoll)
	defer ticker.Stop()
	deadline := time.NewTimer(faReadyTimeout)
	defer deadline.Stop()
	for range int(faReadyTimeout/faReadyPoll) + 1 {
		addr, pid, err := readyfile.Read(path)
		if err == nil {
			return addr, pid, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", 0, err
		}
		select {
		case <-ticker.C:
		case <-done:
			// It may have written the file just before exiting.
			if addr, pid, err := readyfile.Read(path); err == nil {
				return addr, pid, errors.New("exited right after starting")
			}
			return "", 0, errors.New("exited before it was ready")
		case <-deadline.C:
			return "", 0, fmt.Errorf("not ready (no %s) after %v", path, faReadyTimeout)
		case <-ctx.Done():
			return "", 0, fmt.Errorf("waiting for it to be ready: %w", context.Cause(ctx))
		}
	}
	return "", 0, fmt.Errorf("not ready (no %s) after %v", path, faReadyTimeout)
}

// exited reports whether the child has exited.
func (p *datanodeProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the datanode and waits for the child (the
// datanode, or strace, which exits after its tracee and then has written
// its summary). A datanode that does not exit in time is killed, and that
// is an error, as is a non-zero exit.
func (p *datanodeProc) stop() error {
	if p.exited() {
		return p.exitErr("exited before it was stopped")
	}
	target := p.pid
	if target <= 0 {
		target = p.cmd.Process.Pid
	}
	if err := syscall.Kill(target, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		p.kill()
		return fmt.Errorf("datanode: SIGTERM to pid %d: %w", target, err)
	}
	t := time.NewTimer(faStopTimeout)
	defer t.Stop()
	select {
	case <-p.done:
		return p.exitErr("")
	case <-t.C:
		p.kill()
		return fmt.Errorf("datanode: pid %d still running %v after SIGTERM; killed%s", target, faStopTimeout, p.tail())
	}
}

func (p *datanodeProc) exitErr(what string) error {
	if p.waitErr == nil && what == "" {
		return nil
	}
	if what == "" {
		what = "exit"
	}
	return fmt.Errorf("datanode: %s: %v%s", what, p.waitErr, p.tail())
}

// kill sends SIGKILL to the datanode and the child and waits (bounded) for
// the child to exit.
func (p *datanodeProc) kill() {
	if p.pid > 0 && p.pid != p.cmd.Process.Pid && !p.exited() {
		_ = syscall.Kill(p.pid, syscall.SIGKILL) // gone already, at worst: the wait below is bounded
	}
	_ = p.cmd.Process.Kill() // likewise
	t := time.NewTimer(faKillTimeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
	}
}

// tail returns the last lines of the datanode's output, for error messages.
func (p *datanodeProc) tail() string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return ""
	}
	defer closeQuietly(f)
	const window = 64 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > window {
		_, _ = f.Seek(fi.Size()-window, 0) // failing, the file's start is shown: still something
	}
	data := make([]byte, window)
	n, _ := io.ReadFull(f, data)
	data = bytes.TrimSpace(data[:n])
	if len(data) == 0 {
		return ""
	}
	lines := strings.Split(string(data), "\n")
	if len(lines) > faLogTailLines {
		lines = lines[len(lines)-faLogTailLines:]
	}
	return "\n--- datanode output (last lines) ---\n" + strings.Join(lines, "\n")
}
