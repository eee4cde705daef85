package scenario

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"syscall"
	"time"
)

// SourceProfile is what `strace -f` saw one surviving datanode do with its
// data-moving system calls during the re-replication: calls and bytes by
// system call. As a source it sends block files with sendfile (small
// headers with write); as a target it receives with read and writes block
// files with pwrite64 — so the bytes of sendfile against those of
// read/write show whether the source's data went through user space.
type SourceProfile struct {
	Node  uint64                 `json:"node"`
	PID   int                    `json:"pid"`
	Calls map[string]int64       `json:"calls"`
	Bytes map[string]int64       `json:"bytes"`
	Rows  []SourceProfileSyscall `json:"rows"`
	Note  string                 `json:"note"`
}

// SourceProfileSyscall is one row, by bytes.
type SourceProfileSyscall struct {
	Name  string `json:"name"`
	Calls int64  `json:"calls"`
	Bytes int64  `json:"bytes"`
}

// profiledSyscalls are the calls that move data.
const profiledSyscalls = "trace=sendfile,splice,copy_file_range,read,write,readv,writev,pread64,pwrite64,recvfrom,sendto,recvmsg,sendmsg"

// straceTracer is a running `strace -f -p PID -o FILE`.
type straceTracer struct {
	cmd  *exec.Cmd
	out  string
	done chan error
}

// startSourceTrace attaches strace to pid (every thread) and waits until it
// has attached.
func startSourceTrace(ctx context.Context, strace string, pid int, out string) (*straceTracer, error) {
	cmd := exec.CommandContext(ctx, strace, "-f", "-qq", "-e", profiledSyscalls, "-o", out, "-p", strconv.Itoa(pid))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("strace: %w", err)
	}
	t := &straceTracer{cmd: cmd, out: out, done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
		}
		t.done <- cmd.Wait()
	}()
	// strace writes its first lines once attached; a copy only starts after
	// a heartbeat, well after this.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if fi, err := os.Stat(out); err == nil && fi.Size() > 0 {
			return t, nil
		}
		if time.Now().After(deadline) {
			t.stop()
			return nil, fmt.Errorf("strace -p %d wrote nothing within 10 s", pid)
		}
		select {
		case err := <-t.done:
			return nil, fmt.Errorf("strace -p %d ended: %v", pid, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop detaches strace (SIGINT) and waits for it. Its errors are dropped:
// strace may be gone already, and how it ended shows in its trace, which
// is checked when parsed.
func (t *straceTracer) stop() {
	_ = t.cmd.Process.Signal(syscall.SIGINT)
	var err error
	select {
	case err = <-t.done:
	case <-time.After(10 * time.Second):
		_ = t.cmd.Process.Kill()
		err = <-t.done
	}
	_ = err
}

// straceLine matches "PID name(args) = RET" and "PID <... name resumed>...) = RET".
var straceLine = regexp.MustCompile(`^\d+\s+(?:<\.\.\. (\w+) resumed>.*|(\w+)\(.*)\)\s+=\s+(-?\d+)`)

// parseSourceTrace sums calls and returned bytes by system call.
func parseSourceTrace(path string) (*SourceProfile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer closeQuietly(f)
	p := &SourceProfile{Calls: map[string]int64{}, Bytes: map[string]int64{}}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := straceLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		name := m[1] + m[2]
		ret, _ := strconv.ParseInt(m[3], 10, 64)
		p.Calls[name]++
		if ret > 0 {
			p.Bytes[name] += ret
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for name, c := range p.Calls {
		p.Rows = append(p.Rows, SourceProfileSyscall{Name: name, Calls: c, Bytes: p.Bytes[name]})
	}
	sort.Slice(p.Rows, func(i, j int) bool { return p.Rows[i].Bytes > p.Rows[j].Bytes })
	return p, nil
}
