// Package localcluster runs a pipeline of real `spindle datanode` child
// processes on 127.0.0.1: it starts the members with their data and log
// directories, waits until each has written its ready file, and kills
// (SIGKILL), restarts and stops them. No port is picked and closed before
// a member binds it: a member of a meta service binds port 0 and its ready
// file says what it got; the members of a static pipeline, which must know
// each other's addresses before they start, get sockets bound here on port
// 0 (--listen-fd). `spindle bench chunk-write`
// (replicated form) and the multi-process tests of pipelines use it.
//
// Layout: member i (1-based) keeps its volume in DataDir/dn<i>, its Raft
// log in LogDir/dn<i>, its stderr in DataDir/dn<i>.log (appended across
// restarts) and its ready file in DataDir/dn<i>.ready.
//
// # Invariants
//
//   - Only 127.0.0.1 addresses are used (unless Config.Addrs says
//     otherwise); a member keeps its address across restarts (the
//     pipeline's membership names it), except by RestartOnNewPort.
//   - With Config.ProcessGroup each child leads a process group of its own,
//     and Kill, Pause and Resume signal that group (-pid): a signal for one
//     member never reaches another member or the parent.
//   - Every child is started with the parent-death signal SIGKILL, so that
//     no datanode outlives the process that started it, even if that
//     process is killed; Stop (SIGTERM, then SIGKILL after a bounded wait)
//     reaps them in the ordinary case.
//   - Every wait is bounded: readiness by Config.ReadyTimeout, exits by
//     the timeouts given to Stop and by Kill's own bound.
//   - Start fails, with the tail of the member's log, if a child exits
//     before it is ready; it stops the members it started. It does not
//     retry: with no port picked in advance, no port can be lost to
//     another process in between.
//
// # Concurrency
//
// A Cluster's methods may be called from any goroutine; a mutex serialises
// the ones that change a member's process (Kill, Restart, Stop). Addresses
// and directories never change after Start.
package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/readyfile"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// Defaults and limits of Config.
const (
	DefaultMembers      = 3
	MaxMembers          = 9
	DefaultPipelineID   = 1
	DefaultReadyTimeout = 30 * time.Second
	// DefaultStopTimeout is how long Stop waits after SIGTERM before it
	// sends SIGKILL.
	DefaultStopTimeout = 10 * time.Second
	// killTimeout bounds the wait for a SIGKILLed child to be reaped.
	killTimeout = 10 * time.Second
	// listenFD is the descriptor a member's inherited listening socket has
	// in the member (--listen-fd): the first of exec.Cmd.ExtraFiles.
	listenFD = 3
	// readyPoll is the interval at which ready files are looked for.
	readyPoll = 10 * time.Millisecond
	// logTailBytes is how much of a member's log an error quotes.
	logTailBytes = 2048
)

// Config describes a local pipeline.
type Config struct {
	// Binary is the spindle executable. Required.
	Binary string
	// Members is the pipeline's size (default 3).
	Members int
	// PipelineID is the Raft group ID (default 1).
	PipelineID uint64
	// DataDir and LogDir are the parents of the members' directories.
	// Required; they are created when missing.
	DataDir, LogDir string
	// Tick and ElectionTicks are passed as --tick and --election-ticks
	// when set.
	Tick          time.Duration
	ElectionTicks int
	// ExtraArgs are appended to every member's command line; NodeArgs,
	// when set, returns more for member id (1-based).
	ExtraArgs []string
	NodeArgs  func(id int) []string
	// Env is added to the children's environment.
	Env []string
	// ReadyTimeout bounds the wait for one member's ready file (default
	// DefaultReadyTimeout).
	ReadyTimeout time.Duration
	// MetaAddr, when set, runs the members as datanodes of that meta
	// service (--meta) instead of one static pipeline (--id, --pipeline).
	MetaAddr string
	// Addrs, when set, are the members' listen addresses (one per member).
	// Without Addrs every member listens on a port 0 of 127.0.0.1: with
	// MetaAddr a member binds it (--listen 127.0.0.1:0) and its ready file
	// gives its address; without, the cluster binds each member's socket
	// before any starts (every member's --pipeline names them all) and
	// hands it over (--listen-fd).
	Addrs []string
	// ProcessGroup starts each member in a process group of its own
	// (Setpgid), signalled as a group by Kill, Pause and Resume.
	ProcessGroup bool
	// Wrap, when set, rewrites member id's command line (binary first)
	// before it is started: e.g. `ip netns exec NS ...` to run it in a
	// network namespace of its own (netlab). The wrapper must exec the
	// command, so that the process started is the member.
	Wrap func(id int, argv []string) []string
	// OnLaunch, when set, is called with member id's process ID each time
	// its process is started (Start, Restart), before it is ready: e.g. to
	// measure its CPU from its first instant.
	OnLaunch func(id, pid int)
	// TLS is the members' certificate, key and CA (--tls-cert, --tls-key,
	// --tls-ca); zero: plaintext (--insecure).
	TLS tlsconf.Files
	// NodeTLS, when it has an entry for member i (1-based, index i-1),
	// gives that member its own certificate instead of TLS (a datanode's
	// identity is its certificate).
	NodeTLS []tlsconf.Files
}

// Node is one member.
type Node struct {
	ID int // 1-based
	// Addr is the member's address: empty until its first ready file
	// when it binds port 0 itself (a member of a meta service).
	Addr      string
	DataDir   string
	LogDir    string
	LogPath   string // the member's stderr and stdout
	readyPath string
	// ln is the member's socket, bound by the cluster, until its process
	// has inherited it (the first launch of a static pipeline's member).
	ln *net.TCPListener

	proc   *os.Process
	exited chan struct{} // closed once the process is reaped
	state  *os.ProcessState
}

// Cluster is a running local pipeline.
type Cluster struct {
	cfg   Config
	mu    sync.Mutex
	nodes []*Node
}

// Start starts the members and waits until every one is ready.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Binary == "" {
		return nil, errors.New("localcluster: no spindle binary")
	}
	if cfg.DataDir == "" || cfg.LogDir == "" {
		return nil, errors.New("localcluster: data and log directories are required")
	}
	if cfg.Members == 0 {
		cfg.Members = DefaultMembers
	}
	if cfg.Members < 1 || cfg.Members > MaxMembers {
		return nil, fmt.Errorf("localcluster: %d members, want 1..%d", cfg.Members, MaxMembers)
	}
	if cfg.PipelineID == 0 {
		cfg.PipelineID = DefaultPipelineID
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = DefaultReadyTimeout
	}
	if len(cfg.Addrs) > 0 && len(cfg.Addrs) != cfg.Members {
		return nil, fmt.Errorf("localcluster: %d addresses for %d members", len(cfg.Addrs), cfg.Members)
	}
	c := &Cluster{cfg: cfg}
	if err := c.start(ctx); err != nil {
		_ = c.Stop(DefaultStopTimeout) // best effort: err is the error (Stop's: members killed)
		return nil, err
	}
	return c, nil
}

// memberDirs are member id's data and log directories.
func memberDirs(cfg Config, id int) (data, log string) {
	return filepath.Join(cfg.DataDir, fmt.Sprintf("dn%d", id)), filepath.Join(cfg.LogDir, fmt.Sprintf("dn%d", id))
}

func (c *Cluster) start(ctx context.Context) error {
	for i := range c.cfg.Members {
		id := i + 1
		dataDir, logDir := memberDirs(c.cfg, id)
		n := &Node{
			ID:        id,
			DataDir:   dataDir,
			LogDir:    logDir,
			LogPath:   filepath.Join(c.cfg.DataDir, fmt.Sprintf("dn%d.log", id)),
			readyPath: filepath.Join(c.cfg.DataDir, fmt.Sprintf("dn%d.ready", id)),
		}
		for _, d := range []string{n.DataDir, n.LogDir} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("localcluster: %w", err)
			}
		}
		c.nodes = append(c.nodes, n)
		switch {
		case len(c.cfg.Addrs) > 0:
			n.Addr = c.cfg.Addrs[i]
		case c.cfg.MetaAddr == "":
			// Every member's --pipeline names every address: bound
			// here, before any member starts, and handed over.
			ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				return fmt.Errorf("localcluster: member %d's socket: %w", id, err)
			}
			n.ln, n.Addr = ln, ln.Addr().String()
		}
	}
	// With a meta service, a datanode's ID is its rank among the
	// registrations: on their first start the members start one at a
	// time, so that member dnN is node N (the directories and spindle
	// admin agree); once registered each keeps its ID (DATANODE.json in its
	// log directory) and they start together.
	for _, n := range c.nodes {
		if err := c.launch(n); err != nil {
			return err
		}
		if c.cfg.MetaAddr != "" && !registered(n) {
			if err := c.waitReady(ctx, n); err != nil {
				return err
			}
		}
	}
	for _, n := range c.nodes {
		if err := c.waitReady(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// registered says whether member n registered with a meta service in an
// earlier life (the datanode keeps its identity in DATANODE.json).
func registered(n *Node) bool {
	_, err := os.Stat(filepath.Join(n.LogDir, "DATANODE.json"))
	return err == nil
}

// pipelineFlag is the --pipeline value: G:1=ADDR1,2=ADDR2,...
func (c *Cluster) pipelineFlag() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d:", c.cfg.PipelineID)
	for i, n := range c.nodes {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d=%s", n.ID, n.Addr)
	}
	return b.String()
}

// Args returns the command line (without the binary) member n runs with.
func (c *Cluster) args(n *Node) []string {
	args := []string{"datanode"}
	switch {
	case n.ln != nil:
		args = append(args, "--listen-fd", strconv.Itoa(listenFD))
	case n.Addr == "":
		args = append(args, "--listen", "127.0.0.1:0")
	default:
		args = append(args, "--listen", n.Addr)
	}
	args = append(args,
		"--data-dir", n.DataDir,
		"--log-dir", n.LogDir,
		"--ready-file", n.readyPath,
	)
	tf := c.cfg.TLS
	if n.ID >= 1 && n.ID <= len(c.cfg.NodeTLS) {
		tf = c.cfg.NodeTLS[n.ID-1]
	}
	args = append(args, tf.Args()...)
	if c.cfg.MetaAddr != "" {
		args = append(args, "--meta", c.cfg.MetaAddr)
	} else {
		args = append(args, "--id", strconv.Itoa(n.ID), "--pipeline", c.pipelineFlag())
	}
	if c.cfg.Tick > 0 {
		args = append(args, "--tick", c.cfg.Tick.String())
	}
	if c.cfg.ElectionTicks > 0 {
		args = append(args, "--election-ticks", strconv.Itoa(c.cfg.ElectionTicks))
	}
	args = append(args, c.cfg.ExtraArgs...)
	if c.cfg.NodeArgs != nil {
		args = append(args, c.cfg.NodeArgs(n.ID)...)
	}
	return args
}

// launch starts n's process (not waiting for it to be ready).
func (c *Cluster) launch(n *Node) error {
	if err := os.Remove(n.readyPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("localcluster: %w", err)
	}
	logf, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("localcluster: %w", err)
	}
	// The child has its own descriptor; the write of the header is checked.
	defer func() { _ = logf.Close() }()
	argv := append([]string{c.cfg.Binary}, c.args(n)...)
	if c.cfg.Wrap != nil {
		argv = c.cfg.Wrap(n.ID, argv)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), c.cfg.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: c.cfg.ProcessGroup}
	if n.ln != nil {
		// The member inherits its socket (--listen-fd); once it has, the
		// cluster closes its own descriptors, so that the port is free
		// when the member dies (its peers' connections are refused) and
		// a restart binds it again (--listen).
		f, err := n.ln.File()
		if err != nil {
			return fmt.Errorf("localcluster: member %d's socket: %w", n.ID, err)
		}
		defer func() { _ = f.Close() }() // a dup: the member has its own once started
		cmd.ExtraFiles = []*os.File{f}
	}
	if _, err := fmt.Fprintf(logf, "=== localcluster: %s\n", strings.Join(argv, " ")); err != nil {
		return fmt.Errorf("localcluster: member %d's log: %w", n.ID, err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("localcluster: start member %d: %w", n.ID, err)
	}
	if n.ln != nil {
		_ = n.ln.Close() // the member serves on its own descriptor of the socket
		n.ln = nil
	}
	if c.cfg.OnLaunch != nil {
		c.cfg.OnLaunch(n.ID, cmd.Process.Pid)
	}
	exited := make(chan struct{})
	n.proc, n.exited, n.state = cmd.Process, exited, nil
	go func() {
		_ = cmd.Wait() // how it ended is cmd.ProcessState, kept below
		c.mu.Lock()
		if n.exited == exited {
			n.state = cmd.ProcessState
		}
		c.mu.Unlock()
		close(exited)
	}()
	return nil
}

// waitReady waits, bounded by ReadyTimeout, for n's ready file to name n's
// address and process; a member that bound port 0 itself (no address yet)
// has the address its ready file names.
func (c *Cluster) waitReady(ctx context.Context, n *Node) error {
	c.mu.Lock()
	proc, exited, want := n.proc, n.exited, n.Addr
	c.mu.Unlock()
	deadline := time.Now().Add(c.cfg.ReadyTimeout)
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	for {
		if addr, pid, err := readyfile.Read(n.readyPath); err == nil && (want == "" || addr == want) && pid == proc.Pid {
			if want == "" {
				c.mu.Lock()
				n.Addr = addr
				c.mu.Unlock()
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("localcluster: member %d not ready within %v; its log ends:\n%s", n.ID, c.cfg.ReadyTimeout, tail(n.LogPath))
		}
		select {
		case <-exited:
			return fmt.Errorf("localcluster: member %d exited before it was ready; its log ends:\n%s", n.ID, tail(n.LogPath))
		case <-ctx.Done():
			return fmt.Errorf("localcluster: waiting for member %d: %w", n.ID, ctx.Err())
		case <-tick.C:
		}
	}
}

// tail returns the end of the file at path.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	if len(b) > logTailBytes {
		b = b[len(b)-logTailBytes:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// Nodes returns the members, in ID order.
func (c *Cluster) Nodes() []*Node { return c.nodes }

// LogTail is the end of member id's log (its last lines, at most
// logTailBytes), for reports of a member that exited.
func (c *Cluster) LogTail(id int) string {
	if id < 1 || id > len(c.nodes) {
		return fmt.Sprintf("(no member %d)", id)
	}
	return tail(c.nodes[id-1].LogPath)
}

// Addrs returns the members' addresses, in ID order.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.Addr
	}
	return out
}

// PipelineID returns the pipeline's Raft group ID.
func (c *Cluster) PipelineID() uint64 { return c.cfg.PipelineID }

// Node returns the member with address addr, or nil.
func (c *Cluster) Node(addr string) *Node {
	for _, n := range c.nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// Running reports whether member id's process is alive.
func (c *Cluster) Running(id int) bool {
	n := c.node(id)
	c.mu.Lock()
	exited := n.exited
	c.mu.Unlock()
	if exited == nil {
		return false
	}
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// Procs returns the running members as processes "dn<i>" (a bench
// charges their CPU time to its loop: bench.LoopConfig.Processes).
func (c *Cluster) Procs() []bench.Proc {
	out := make([]bench.Proc, 0, len(c.nodes))
	for _, n := range c.nodes {
		if c.Running(n.ID) {
			out = append(out, bench.Proc{Name: fmt.Sprintf("dn%d", n.ID), PID: c.PID(n.ID)})
		}
	}
	return out
}

// PID returns member id's process ID (0 if it never started).
func (c *Cluster) PID(id int) int {
	n := c.node(id)
	c.mu.Lock()
	defer c.mu.Unlock()
	if n.proc == nil {
		return 0
	}
	return n.proc.Pid
}

func (c *Cluster) node(id int) *Node {
	if id < 1 || id > len(c.nodes) {
		panic(fmt.Sprintf("localcluster: no member %d", id))
	}
	return c.nodes[id-1]
}

// Kill sends SIGKILL to member id and waits (bounded) until it is reaped.
func (c *Cluster) Kill(id int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.signalAndWait(c.node(id), syscall.SIGKILL, killTimeout)
}

// signalAndWait sends sig to n and waits up to timeout for its exit; the
// caller holds c.mu, which is released while waiting.
func (c *Cluster) signalAndWait(n *Node, sig syscall.Signal, timeout time.Duration) error {
	if n.proc == nil {
		return nil
	}
	exited := n.exited
	select {
	case <-exited:
		return nil
	default:
	}
	if err := c.signal(n, sig); err != nil {
		return err
	}
	c.mu.Unlock()
	defer c.mu.Lock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-exited:
		return nil
	case <-t.C:
		return fmt.Errorf("localcluster: member %d (pid %d) still running %v after %v", n.ID, n.proc.Pid, timeout, sig)
	}
}

// signal sends sig to n's process, or to its process group with
// Config.ProcessGroup; the caller holds c.mu. A process already reaped is
// not signalled (its PID may be reused).
func (c *Cluster) signal(n *Node, sig syscall.Signal) error {
	if n.proc == nil {
		return nil
	}
	select {
	case <-n.exited:
		return nil
	default:
	}
	var err error
	if c.cfg.ProcessGroup {
		err = syscall.Kill(-n.proc.Pid, sig)
		if errors.Is(err, syscall.ESRCH) {
			err = nil // exited, not yet reaped
		}
	} else if err = n.proc.Signal(sig); errors.Is(err, os.ErrProcessDone) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("localcluster: signal %v to member %d: %w", sig, n.ID, err)
	}
	return nil
}

// Pause stops member id with SIGSTOP (its sockets stay open, it answers
// nothing) until Resume; a member not running is left alone.
func (c *Cluster) Pause(id int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.signal(c.node(id), syscall.SIGSTOP)
}

// Resume continues member id with SIGCONT (harmless when it is not
// stopped).
func (c *Cluster) Resume(id int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.signal(c.node(id), syscall.SIGCONT)
}

// Restart starts member id again (it must have exited: Kill it first) with
// the same address and directories, and waits until it is ready.
func (c *Cluster) Restart(ctx context.Context, id int) error {
	n := c.node(id)
	if c.Running(id) {
		return fmt.Errorf("localcluster: member %d is running", id)
	}
	c.mu.Lock()
	err := c.launch(n)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return c.waitReady(ctx, n)
}

// RestartOnNewPort starts member id again (it must have exited) with the
// same directories on a port 0 of 127.0.0.1 (--listen 127.0.0.1:0), as a
// datanode started so comes back, and waits until it is ready: its address
// is then the one its ready file names. Only for
// clusters with a meta service (a static --pipeline names the old address).
func (c *Cluster) RestartOnNewPort(ctx context.Context, id int) error {
	if c.cfg.MetaAddr == "" {
		return fmt.Errorf("localcluster: member %d: a new port needs a meta service", id)
	}
	n := c.node(id)
	if c.Running(id) {
		return fmt.Errorf("localcluster: member %d is running", id)
	}
	c.mu.Lock()
	n.Addr = ""
	err := c.launch(n)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return c.waitReady(ctx, n)
}

// ExitStatus describes how member id's last process ended ("" while it
// runs or if it never started).
func (c *Cluster) ExitStatus(id int) string {
	n := c.node(id)
	c.mu.Lock()
	defer c.mu.Unlock()
	if n.state == nil {
		return ""
	}
	return n.state.String()
}

// Stop sends SIGTERM to every running member, waits up to timeout for them
// to exit, then SIGKILLs the rest. It returns an error naming the members
// that had to be killed or exited with a failure status.
func (c *Cluster) Stop(timeout time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.ln != nil { // a socket never handed over (a failed Start)
			_ = n.ln.Close() // never served: nothing to report
			n.ln = nil
		}
		// Errors dropped: signalAndWait below signals again and reports.
		_ = c.signal(n, syscall.SIGCONT) // a paused member could not act on SIGTERM
		_ = c.signal(n, syscall.SIGTERM)
	}
	var errs []error
	deadline := time.Now().Add(timeout)
	for _, n := range c.nodes {
		if n.proc == nil {
			continue
		}
		if err := c.signalAndWait(n, syscall.SIGTERM, max(time.Until(deadline), 0)); err != nil {
			errs = append(errs, err)
			if kerr := c.signalAndWait(n, syscall.SIGKILL, killTimeout); kerr != nil {
				errs = append(errs, kerr)
			}
			continue
		}
		if n.state != nil && !n.state.Success() && !killed(n.state) {
			errs = append(errs, fmt.Errorf("localcluster: member %d: %s; its log ends:\n%s", n.ID, n.state, tail(n.LogPath)))
		}
	}
	return errors.Join(errs...)
}

// killed reports whether the process was ended by SIGKILL (by Kill).
func killed(st *os.ProcessState) bool {
	ws, ok := st.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// Logs returns the ends of every member's log, for a failing test.
func (c *Cluster) Logs() string {
	var b strings.Builder
	for _, n := range c.nodes {
		fmt.Fprintf(&b, "--- member %d (%s) %s:\n%s\n", n.ID, n.Addr, n.LogPath, tail(n.LogPath))
	}
	return b.String()
}

// CopyLogs writes every member's whole log to w (a log that cannot be
// opened is left out). It returns the first error of writing to w or
// reading a log.
func (c *Cluster) CopyLogs(w io.Writer) error {
	for _, n := range c.nodes {
		if _, err := fmt.Fprintf(w, "--- member %d (%s):\n", n.ID, n.Addr); err != nil {
			return fmt.Errorf("localcluster: copying the logs: %w", err)
		}
		if f, err := os.Open(n.LogPath); err == nil {
			_, err := io.Copy(w, f)
			_ = f.Close() // read-only
			if err != nil {
				return fmt.Errorf("localcluster: copying member %d's log: %w", n.ID, err)
			}
		}
	}
	return nil
}
