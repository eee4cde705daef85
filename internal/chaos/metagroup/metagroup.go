// Package metagroup runs the meta service of a chaos run: one member or a
// raft group of several, each `spindle meta` a child process in a process
// group of its own (signalled by group, so that only what the run started
// is signalled), dying with its parent. Member i (1-based) keeps its store
// in Dir/meta<i>, its output in Dir/meta<i>.log.
package metagroup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/readyfile"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// Bounds of the members' processes.
const (
	ReadyTimeout  = 60 * time.Second
	KillTimeout   = 10 * time.Second
	LeaderTimeout = 5 * time.Second
	// StartAttempts bounds the launches of a member that exits before it
	// is ready (its port held by another process for a moment).
	StartAttempts = 5
)

// Config configures a Group.
type Config struct {
	Binary, Dir string
	// Addrs are the members' addresses, member i's at i-1 (fixed: a
	// member's raft identity is its address).
	Addrs []string
	// TLS is the members' certificate, key and CA (zero: --insecure);
	// ClientTLS the settings Leader asks the members with.
	TLS       tlsconf.Files
	ClientTLS *tlsconf.Settings
	// MemberTLS, when set, is each member's own pair (member id:
	// MemberTLS[id-1]), bound to its ID for raft (tlsconf.MemberOf).
	MemberTLS []tlsconf.Files
	// Args are added to every member's command line.
	Args []string
	// Listeners, when set, are the members' listening sockets on Addrs
	// (bound by the caller to port 0): a member's first launch inherits
	// its socket (--listen-fd) and the group closes its own copy, so that
	// no port is picked, closed and lost before the member binds it.
	// Later launches bind Addrs[i] again (--listen).
	Listeners []*net.TCPListener
}

// Group is the meta members' processes.
type Group struct {
	cfg    Config
	mu     sync.Mutex
	procs  []*os.Process
	exited []chan struct{}
	// status are Leader's clients, one per member (made once: each
	// keeps its connections).
	status []*metaapi.Client
}

// New returns the group of cfg, none of its members started.
func New(cfg Config) *Group {
	return &Group{cfg: cfg, procs: make([]*os.Process, len(cfg.Addrs)), exited: make([]chan struct{}, len(cfg.Addrs))}
}

// Size is the number of members.
func (g *Group) Size() int { return len(g.cfg.Addrs) }

func (g *Group) file(i int, ext string) string {
	return filepath.Join(g.cfg.Dir, fmt.Sprintf("meta%d%s", i, ext))
}

// Start launches meta member id (0: every member, at once: a group
// serves once a majority runs) on its address and directory, and waits
// (bounded) until each is ready; one that exits first is launched again
// (its port may be held for a moment).
func (g *Group) Start(ctx context.Context, id int) error {
	ids := []int{id}
	if id == 0 {
		ids = ids[:0]
		for i := range g.cfg.Addrs {
			ids = append(ids, i+1)
		}
	}
	for _, i := range ids {
		if err := g.launch(i); err != nil {
			return err
		}
	}
	var errs []error
	for _, i := range ids {
		err := g.waitReady(ctx, i)
		for attempt := 1; err != nil && attempt < StartAttempts && ctx.Err() == nil; attempt++ {
			time.Sleep(time.Duration(attempt) * 200 * time.Millisecond)
			if err = g.launch(i); err == nil {
				err = g.waitReady(ctx, i)
			}
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// launch starts meta member id's process.
func (g *Group) launch(id int) error {
	if err := os.Remove(g.file(id, ".ready")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("metagroup: %w", err)
	}
	logf, err := os.OpenFile(g.file(id, ".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("metagroup: %w", err)
	}
	defer func() { _ = logf.Close() }() // the child has its own descriptor; the header's write is checked
	listen := []string{"--listen", g.cfg.Addrs[id-1]}
	var extra []*os.File
	g.mu.Lock()
	var ln *net.TCPListener
	if id-1 < len(g.cfg.Listeners) {
		ln, g.cfg.Listeners[id-1] = g.cfg.Listeners[id-1], nil
	}
	g.mu.Unlock()
	if ln != nil {
		f, err := ln.File()
		cerr := ln.Close() // the dup in f is the member's once started
		if err != nil || cerr != nil {
			return fmt.Errorf("metagroup: meta member %d's socket: %w", id, errors.Join(err, cerr))
		}
		defer func() { _ = f.Close() }() // the member has its own once started
		listen, extra = []string{"--listen-fd", "3"}, []*os.File{f}
	}
	args := append([]string{"meta"}, listen...)
	args = append(args, "--dir", g.file(id, ""), "--ready-file", g.file(id, ".ready"))
	if len(g.cfg.Addrs) > 1 {
		var peers []string
		for i, a := range g.cfg.Addrs {
			peers = append(peers, fmt.Sprintf("%d=%s", i+1, a))
		}
		args = append(args, "--id", fmt.Sprint(id), "--peers", strings.Join(peers, ","))
	}
	if id <= len(g.cfg.MemberTLS) {
		args = append(args, g.cfg.MemberTLS[id-1].Args()...)
	} else if g.cfg.TLS.IsZero() {
		args = append(args, "--insecure")
	} else {
		args = append(args, g.cfg.TLS.Args()...)
	}
	args = append(args, g.cfg.Args...)
	cmd := exec.Command(g.cfg.Binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = extra // fd 3: --listen-fd
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if _, err := fmt.Fprintf(logf, "=== metagroup: %s %s\n", g.cfg.Binary, strings.Join(args, " ")); err != nil {
		return fmt.Errorf("metagroup: meta member %d's log: %w", id, err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("metagroup: start meta member %d: %w", id, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }() // how it ended is in its log
	g.mu.Lock()
	g.procs[id-1], g.exited[id-1] = cmd.Process, exited
	g.mu.Unlock()
	return nil
}

// waitReady waits (bounded) for meta member id's ready file.
func (g *Group) waitReady(ctx context.Context, id int) error {
	g.mu.Lock()
	proc, exited := g.procs[id-1], g.exited[id-1]
	g.mu.Unlock()
	deadline := time.Now().Add(ReadyTimeout)
	for {
		if a, pid, err := readyfile.Read(g.file(id, ".ready")); err == nil && a == g.cfg.Addrs[id-1] && pid == proc.Pid {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.Join(fmt.Errorf("metagroup: meta member %d not ready within %v (log %s)", id, ReadyTimeout, g.file(id, ".log")), g.Kill(id))
		}
		select {
		case <-exited:
			return fmt.Errorf("metagroup: meta member %d exited before it was ready (log %s)", id, g.file(id, ".log"))
		case <-ctx.Done():
			return errors.Join(ctx.Err(), g.Kill(id))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Running reports whether meta member id's process is alive.
func (g *Group) Running(id int) bool {
	g.mu.Lock()
	exited := g.exited[id-1]
	g.mu.Unlock()
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

// Leader is the meta member serving as the leader (with one member,
// that one); 0 when none answers so (bounded by LeaderTimeout).
func (g *Group) Leader(ctx context.Context) int {
	if len(g.cfg.Addrs) == 1 {
		return 1
	}
	g.mu.Lock()
	for _, a := range g.cfg.Addrs[len(g.status):] {
		mc, err := metaapi.NewClient(a, metaapi.ClientOptions{Attempts: 1, Timeout: time.Second, TLS: g.cfg.ClientTLS})
		if err != nil {
			g.mu.Unlock()
			return 0
		}
		g.status = append(g.status, mc)
	}
	status := g.status
	g.mu.Unlock()
	deadline := time.Now().Add(LeaderTimeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for i, mc := range status {
			if st, err := mc.MetaStatus(ctx); err == nil && st.Serving {
				return i + 1
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 0
}

// Kill sends SIGKILL to meta member id's process group and waits
// (bounded) until it is reaped.
func (g *Group) Kill(id int) error {
	return g.signal(id, syscall.SIGKILL, KillTimeout)
}

// signal signals meta member id's process group; with wait > 0 it
// waits that long for the exit.
func (g *Group) signal(id int, sig syscall.Signal, wait time.Duration) error {
	g.mu.Lock()
	proc, exited := g.procs[id-1], g.exited[id-1]
	g.mu.Unlock()
	if proc == nil {
		return nil
	}
	select {
	case <-exited:
		return nil
	default:
	}
	if err := syscall.Kill(-proc.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("metagroup: signal %v to meta member %d: %w", sig, id, err)
	}
	if wait <= 0 {
		return nil
	}
	select {
	case <-exited:
		return nil
	case <-time.After(wait):
		return fmt.Errorf("metagroup: meta member %d (pid %d) still running %v after %v", id, proc.Pid, wait, sig)
	}
}

// Stop stops every member: SIGCONT, SIGTERM, then SIGKILL after wait.
func (g *Group) Stop(wait time.Duration) error {
	var errs []error
	for id := range g.Size() {
		_ = g.signal(id+1, syscall.SIGCONT, 0) // SIGTERM's, just below, is reported
		if err := g.signal(id+1, syscall.SIGTERM, wait); err != nil {
			errs = append(errs, err, g.Kill(id+1))
		}
	}
	return errors.Join(errs...)
}
