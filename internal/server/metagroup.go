package server

// A replicated meta service for the embedded cluster (Config.MetaReplicas
// > 1): each member a `spindle meta --id I --peers …` child process with
// its own directory (Dir/meta<I>) and log (Dir/meta<I>.log), so that a
// member can crash (kill -9) and restart without the others; the members'
// addresses are chosen at the first start and kept in server.json (a
// member's raft identity is its address). Member 1 listens on MetaListen.
// At the first start every member's --peers names every address before
// any member runs: the server binds the members' sockets (port 0 unless
// MetaListen gives member 1's) and hands each over (--listen-fd), so no
// port is picked, closed and lost in between. A restart binds the kept
// address again (--listen).
// The children die with the server (parent-death signal).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// metaStopTimeout bounds a member's clean stop (SIGTERM) before SIGKILL.
const metaStopTimeout = 10 * time.Second

// MetaProcs is the meta member processes of a server with MetaReplicas > 1.
type MetaProcs struct {
	cfg   Config
	tls   []tlsconf.Files // each member's own (none: --insecure)
	addrs []string
	mu    sync.Mutex
	procs []*exec.Cmd
	done  []chan struct{}
}

// metaMemberDir is member id's directory under Dir.
func metaMemberDir(dir string, id int) string { return filepath.Join(dir, fmt.Sprintf("meta%d", id)) }

// metaListeners binds the members' sockets at the first start: member 1's
// on MetaListen, the others on port 0 of its host.
func metaListeners(listen string, n int) ([]*net.TCPListener, error) {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("server: --meta-listen %q: %w", listen, err)
	}
	var out []*net.TCPListener
	for i := range n {
		a := net.JoinHostPort(host, "0")
		if i == 0 {
			a = listen
		}
		ln, err := net.Listen("tcp", a)
		if err != nil {
			for _, l := range out {
				_ = l.Close() // never served
			}
			return nil, fmt.Errorf("server: meta member %d's socket: %w", i+1, err)
		}
		out = append(out, ln.(*net.TCPListener))
	}
	return out, nil
}

// startMetaGroup starts the members and waits (ReadyTimeout) until one
// serves as leader. lns, when given (the first start), are the members'
// sockets, handed over and closed here.
func startMetaGroup(ctx context.Context, cfg Config, addrs []string, lns []*net.TCPListener, files []tlsconf.Files, client *tlsconf.Settings) (*MetaProcs, error) {
	g := &MetaProcs{cfg: cfg, tls: files, addrs: addrs, procs: make([]*exec.Cmd, len(addrs)), done: make([]chan struct{}, len(addrs))}
	defer func() {
		for _, ln := range lns {
			_ = ln.Close() // each member has its own descriptor once started; unstarted ones never served
		}
	}()
	for i := range addrs {
		var ln *net.TCPListener
		if i < len(lns) {
			ln = lns[i]
		}
		if err := g.launch(i, ln); err != nil {
			stopQuietly(g.stop)
			return nil, err
		}
	}
	mc, err := metaapi.NewClient(strings.Join(addrs, ","), metaapi.ClientOptions{Timeout: 2 * time.Second, TLS: client})
	if err != nil {
		stopQuietly(g.stop)
		return nil, err
	}
	deadline := time.Now().Add(cfg.ReadyTimeout)
	for {
		_, err := mc.ListBuckets(ctx)
		if err == nil {
			return g, nil
		}
		for i := range addrs {
			select {
			case <-g.done[i]:
				stopQuietly(g.stop)
				return nil, fmt.Errorf("server: meta member %d exited; its log ends:\n%s", i+1, metaLogTail(g.logPath(i)))
			default:
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			stopQuietly(g.stop)
			return nil, fmt.Errorf("server: no meta leader serving within %v (last error: %v); member logs in %s", cfg.ReadyTimeout, err, cfg.Dir)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (g *MetaProcs) logPath(i int) string {
	return filepath.Join(g.cfg.Dir, fmt.Sprintf("meta%d.log", i+1))
}

// peers is the --peers value.
func (g *MetaProcs) peers() string {
	var b strings.Builder
	for i, a := range g.addrs {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d=%s", i+1, a)
	}
	return b.String()
}

// launch starts member i+1's process: on ln, handed over (--listen-fd),
// when given, else on its address (--listen).
func (g *MetaProcs) launch(i int, ln *net.TCPListener) error {
	logf, err := os.OpenFile(g.logPath(i), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	// The child has its own descriptor; the write of the header is checked.
	defer func() { _ = logf.Close() }()
	listen := []string{"--listen", g.addrs[i]}
	var extra []*os.File
	if ln != nil {
		f, err := ln.File()
		if err != nil {
			return fmt.Errorf("server: meta member %d's socket: %w", i+1, err)
		}
		defer func() { _ = f.Close() }() // a dup: the member has its own once started
		listen, extra = []string{"--listen-fd", "3"}, []*os.File{f}
	}
	args := append([]string{"meta", "--id", strconv.Itoa(i + 1), "--peers", g.peers()}, listen...)
	args = append(args, "--dir", metaMemberDir(g.cfg.Dir, i+1), "--ready-file", metaMemberDir(g.cfg.Dir, i+1)+".ready")
	if i < len(g.tls) { // its own pair (bound to its ID: raft), and the CA that renews it
		args = append(append(args, g.tls[i].Args()...), "--join-ca-dir", filepath.Dir(g.tls[i].CA))
	} else {
		args = append(args, tlsconf.Files{}.Args()...)
	}
	args = append(args, g.cfg.MetaArgs...)
	cmd := exec.Command(g.cfg.Binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = extra // fd 3: --listen-fd
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if _, err := fmt.Fprintf(logf, "=== spindle server: %s %s\n", g.cfg.Binary, strings.Join(args, " ")); err != nil {
		return fmt.Errorf("server: meta member %d's log: %w", i+1, err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("server: start meta member %d: %w", i+1, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait() // how it ended is in its log (metaLogTail)
		close(done)
	}()
	g.mu.Lock()
	g.procs[i], g.done[i] = cmd, done
	g.mu.Unlock()
	return nil
}

// Kill kills member id (1-based) with SIGKILL and waits for it (tests).
func (g *MetaProcs) Kill(id int) error {
	g.mu.Lock()
	p, done := g.procs[id-1], g.done[id-1]
	g.mu.Unlock()
	if p == nil {
		return fmt.Errorf("meta member %d not started", id)
	}
	if err := p.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-done
	return nil
}

// Restart starts member id (1-based) again, after Kill.
func (g *MetaProcs) Restart(id int) error { return g.launch(id-1, nil) }

// PID is member id's process ID (1-based).
func (g *MetaProcs) PID(id int) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.procs[id-1].Process.Pid
}

// stop stops every member: SIGTERM, SIGKILL after metaStopTimeout.
func (g *MetaProcs) stop() error {
	g.mu.Lock()
	procs, dones := append([]*exec.Cmd(nil), g.procs...), append([]chan struct{}(nil), g.done...)
	g.mu.Unlock()
	for _, p := range procs {
		if p != nil {
			_ = p.Process.Signal(syscall.SIGTERM)
		}
	}
	var err error
	for i, p := range procs {
		if p == nil {
			continue
		}
		select {
		case <-dones[i]:
		case <-time.After(metaStopTimeout):
			_ = p.Process.Kill()
			<-dones[i]
			err = fmt.Errorf("server: meta member %d did not stop within %v: killed", i+1, metaStopTimeout)
		}
	}
	return err
}

// metaLogTail is the end of a log file.
func metaLogTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	const max = 4096
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}
