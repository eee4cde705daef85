package chaos

import (
	"bytes"
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

	"github.com/spindle-store/spindle/internal/localcluster"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/netlab"
	"github.com/spindle-store/spindle/internal/readyfile"
)

// labDatanodePort is every datanode's port when each has a network
// namespace of its own.
const labDatanodePort = "9870"

// Limits of the cluster's processes.
const (
	processReadyTimeout = 60 * time.Second
	processKillTimeout  = 10 * time.Second
	processStopTimeout  = 10 * time.Second
	// metaRestartAttempts bounds the tries to bring the meta service back
	// on its port (another process may hold it for a moment).
	metaRestartAttempts = 5
)

// cluster is the meta service and the datanodes, each a child process in
// a process group of its own, under root:
//
//	meta/          the meta service's store; meta.log its output
//	datanodes/     localcluster's layout (dn<i>/, log/dn<i>/, dn<i>.log)
type cluster struct {
	bin, root string
	metaArgs  []string

	mu         sync.Mutex
	metaAddr   string
	metaProc   *os.Process
	metaExited chan struct{}
	metaPaused bool

	dns  *localcluster.Cluster
	meta *metaapi.Client
}

func (c *cluster) metaDir() string   { return filepath.Join(c.root, "meta") }
func (c *cluster) metaLog() string   { return filepath.Join(c.root, "meta.log") }
func (c *cluster) metaReady() string { return filepath.Join(c.root, "meta.ready") }

// startCluster starts the meta service, then datanodes datanodes.
// With lab, datanode i runs on lab's host "dn<i>" (its own network
// namespace, listening on that host's address) and the meta service on
// the bridge's address, where the datanodes reach it.
func startCluster(ctx context.Context, bin, root string, datanodes int, metaArgs, dnArgs []string, lab *netlab.Net) (*cluster, error) {
	host := "127.0.0.1"
	if lab != nil {
		host = lab.BridgeAddr()
	}
	// The meta service binds port 0 at its first start and its ready file
	// says what it got; its restarts bind that address again (the
	// datanodes know it).
	c := &cluster{bin: bin, root: root, metaArgs: metaArgs, metaAddr: net.JoinHostPort(host, "0")}
	if err := c.startMeta(ctx); err != nil {
		return nil, err
	}
	addr := c.metaAddr
	var err error
	if c.meta, err = metaapi.NewClient(addr, metaapi.ClientOptions{Timeout: 10 * time.Second}); err != nil {
		_ = c.stop() // best effort: err is the error
		return nil, err
	}
	dn := filepath.Join(root, "datanodes")
	lc := localcluster.Config{
		Binary: bin, Members: datanodes, DataDir: dn, LogDir: filepath.Join(dn, "log"),
		MetaAddr: addr, ExtraArgs: dnArgs, ProcessGroup: true, ReadyTimeout: processReadyTimeout,
	}
	if lab != nil {
		for i := 1; i <= datanodes; i++ {
			// One namespace per datanode: the same port on every host.
			lc.Addrs = append(lc.Addrs, net.JoinHostPort(lab.Addr(fmt.Sprintf("dn%d", i)), labDatanodePort))
		}
		lc.Wrap = func(id int, argv []string) []string { return lab.Command(fmt.Sprintf("dn%d", id), argv) }
	}
	c.dns, err = localcluster.Start(ctx, lc)
	if err != nil {
		_ = c.stop() // best effort: err is the error
		return nil, fmt.Errorf("chaos: datanodes: %w", err)
	}
	return c, nil
}

// startMeta launches the meta service on c.metaAddr and its directory and
// waits (bounded) until it is ready; when c.metaAddr's port is 0 (the first
// start), c.metaAddr becomes the address its ready file names.
func (c *cluster) startMeta(ctx context.Context) error {
	var err error
	for attempt := 1; attempt <= metaRestartAttempts; attempt++ {
		if err = c.launchMeta(ctx); err == nil || ctx.Err() != nil {
			return err
		}
		time.Sleep(time.Duration(attempt) * 200 * time.Millisecond) // the port may be held for a moment
	}
	return err
}

func (c *cluster) launchMeta(ctx context.Context) error {
	if err := os.MkdirAll(c.metaDir(), 0o755); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	if err := os.Remove(c.metaReady()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("chaos: %w", err)
	}
	logf, err := os.OpenFile(c.metaLog(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	defer func() { _ = logf.Close() }() // the child has its own descriptor; the header's write is checked
	// Plaintext, as its datanodes (localcluster without TLS): the chaos
	// bench judges replication and recovery, not the transport.
	args := append([]string{"meta", "--insecure", "--listen", c.metaAddr, "--dir", c.metaDir(), "--ready-file", c.metaReady()}, c.metaArgs...)
	cmd := exec.Command(c.bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if _, err := fmt.Fprintf(logf, "=== chaos: %s %s\n", c.bin, strings.Join(args, " ")); err != nil {
		return fmt.Errorf("chaos: meta service log: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("chaos: start meta service: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }() // how it ended is in its log
	c.mu.Lock()
	c.metaProc, c.metaExited, c.metaPaused = cmd.Process, exited, false
	c.mu.Unlock()
	deadline := time.Now().Add(processReadyTimeout)
	for {
		if a, pid, err := readyfile.Read(c.metaReady()); err == nil && pid == cmd.Process.Pid && (a == c.metaAddr || anyPort(c.metaAddr)) {
			if a != c.metaAddr {
				c.metaAddr = a // the first start, before any other goroutine reads it
			}
			return nil
		}
		if time.Now().After(deadline) {
			return errors.Join(fmt.Errorf("chaos: meta service not ready within %v (log %s)", processReadyTimeout, c.metaLog()), c.killMeta())
		}
		select {
		case <-exited:
			return fmt.Errorf("chaos: meta service exited before it was ready (log %s)", c.metaLog())
		case <-ctx.Done():
			return errors.Join(ctx.Err(), c.killMeta())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// anyPort says whether addr's port is 0: the listener picks one.
func anyPort(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	return err == nil && port == "0"
}

// metaRunning reports whether the meta service's process is alive.
func (c *cluster) metaRunning() bool {
	c.mu.Lock()
	exited := c.metaExited
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

// killMeta sends SIGKILL to the meta service's process group and waits
// (bounded) until it is reaped.
func (c *cluster) killMeta() error {
	return c.signalMeta(syscall.SIGKILL, processKillTimeout)
}

// signalMeta signals the meta service's process group; with wait > 0 it
// waits that long for the exit.
func (c *cluster) signalMeta(sig syscall.Signal, wait time.Duration) error {
	c.mu.Lock()
	proc, exited := c.metaProc, c.metaExited
	c.mu.Unlock()
	if proc == nil {
		return nil
	}
	select {
	case <-exited:
		return nil
	default:
	}
	if err := syscall.Kill(-proc.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("chaos: signal %v to the meta service: %w", sig, err)
	}
	if wait <= 0 {
		return nil
	}
	select {
	case <-exited:
		return nil
	case <-time.After(wait):
		return fmt.Errorf("chaos: meta service (pid %d) still running %v after %v", proc.Pid, wait, sig)
	}
}

// stop stops every process: SIGCONT, SIGTERM, then SIGKILL after a
// bounded wait.
func (c *cluster) stop() error {
	var errs []error
	if c.dns != nil {
		errs = append(errs, c.dns.Stop(processStopTimeout))
	}
	_ = c.signalMeta(syscall.SIGCONT, 0) // SIGTERM's, just below, is reported
	if err := c.signalMeta(syscall.SIGTERM, processStopTimeout); err != nil {
		errs = append(errs, err, c.killMeta())
	}
	return errors.Join(errs...)
}

// restartDatanode restarts datanode id on its directories and address;
// if that fails (its port taken meanwhile, say) it tries a new port, as a
// datanode started with --listen 127.0.0.1:0 comes back, and returns the
// first failure for the report, nil only if the first try worked.
func (c *cluster) restartDatanode(ctx context.Context, id int) error {
	err := c.dns.Restart(ctx, id)
	if err == nil || ctx.Err() != nil {
		return err
	}
	if c.dns.Running(id) {
		if kerr := c.dns.Kill(id); kerr != nil {
			return errors.Join(err, kerr)
		}
	}
	if nerr := c.dns.RestartOnNewPort(ctx, id); nerr != nil {
		return errors.Join(err, nerr)
	}
	return &portMovedError{fmt.Errorf("datanode %d came back on a new port, %s: on its own: %w", id, c.dns.Nodes()[id-1].Addr, err)}
}

// portMovedError is a datanode that came back, on a new port: worth a
// note, not a failed heal.
type portMovedError struct{ error }

func (e *portMovedError) Unwrap() error { return e.error }

// countInLogs counts the lines of every datanode's log (all its lives:
// logs are appended across restarts) that contain needle.
func (c *cluster) countInLogs(needle string) (int, error) {
	n := 0
	for _, dn := range c.dns.Nodes() {
		b, err := os.ReadFile(dn.LogPath)
		if err != nil {
			return n, fmt.Errorf("chaos: %w", err)
		}
		n += bytes.Count(b, []byte(needle))
	}
	return n, nil
}

// waitPipeline waits (bounded by d) until an allocatable pipeline has a
// leader.
func (c *cluster) waitPipeline(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		pl, err := c.meta.Pipelines(ctx)
		if err == nil {
			for _, p := range pl {
				if p.Allocatable && p.Leader != 0 {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: no allocatable pipeline with a leader within %v (last error: %v); logs in %s", d, err, c.root)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
