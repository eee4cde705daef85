package server

// A replicated meta service for the embedded cluster (Config.MetaReplicas
// > 1): each member a `spindle meta --id I --peers …` child process with
// its own directory (Dir/meta<I>) and log (Dir/meta<I>.log), so that a
// member can crash (kill -9) and restart without the others; the members'
// addresses are chosen at the first start and kept in server.json (a
// member's raft identity is its address). Member 1 listens on MetaListen.
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
	tls   tlsconf.Files // the members' (zero: --insecure)
	addrs []string
	mu    sync.Mutex
	procs []*exec.Cmd
	done  []chan struct{}
}

// metaMemberDir is member id's directory under Dir.
func metaMemberDir(dir string, id int) string { return filepath.Join(dir, fmt.Sprintf("meta%d", id)) }

// metaAddrs picks the members' addresses at the first start: member 1 on
// MetaListen (a free port when it is :0), the others on free ports.
func metaAddrs(listen string, n int) ([]string, error) {
	var out []string
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close() // it only held the port free until now
		}
	}()
	for i := range n {
		a := "127.0.0.1:0"
		if i == 0 {
			a = listen
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("server: --meta-listen %q: %w", listen, err)
		}
		if port != "0" {
			out = append(out, a)
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("server: a free port for meta member %d: %w", i+1, err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// startMetaGroup starts the members and waits (ReadyTimeout) until one
// serves as leader.
func startMetaGroup(ctx context.Context, cfg Config, addrs []string, files tlsconf.Files, client *tlsconf.Settings) (*MetaProcs, error) {
	g := &MetaProcs{cfg: cfg, tls: files, addrs: addrs, procs: make([]*exec.Cmd, len(addrs)), done: make([]chan struct{}, len(addrs))}
	for i := range addrs {
		if err := g.launch(i); err != nil {
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

// launch starts member i+1's process.
func (g *MetaProcs) launch(i int) error {
	logf, err := os.OpenFile(g.logPath(i), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	// The child has its own descriptor; the write of the header is checked.
	defer func() { _ = logf.Close() }()
	args := []string{"meta", "--id", strconv.Itoa(i + 1), "--peers", g.peers(), "--listen", g.addrs[i],
		"--dir", metaMemberDir(g.cfg.Dir, i+1), "--ready-file", metaMemberDir(g.cfg.Dir, i+1) + ".ready"}
	args = append(args, g.tls.Args()...)
	args = append(args, g.cfg.MetaArgs...)
	cmd := exec.Command(g.cfg.Binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
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
func (g *MetaProcs) Restart(id int) error { return g.launch(id - 1) }

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
