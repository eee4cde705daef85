package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spindle-store/spindle/internal/chaos/metagroup"
	"github.com/spindle-store/spindle/internal/localcluster"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/netlab"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// labDatanodePort is every datanode's port when each has a network
// namespace of its own.
const labDatanodePort = "9870"

// Limits of the cluster's processes.
const (
	processReadyTimeout = metagroup.ReadyTimeout
	processStopTimeout  = 10 * time.Second
)

// cluster is the meta service (one member, or a raft group of several)
// and the datanodes, each a child process in a process group of its own,
// under root:
//
//	meta<i>/       meta member i's store; meta<i>.log its output
//	datanodes/     localcluster's layout (dn<i>/, log/dn<i>/, dn<i>.log)
//	tls/           the run's PKI (tlsconf.EnsureLocal), unless insecure
type cluster struct {
	root string
	// tls is the bench's own client settings (an admin's; nil with
	// --insecure).
	tls *tlsconf.Settings

	metas *metagroup.Group
	dns   *localcluster.Cluster
	meta  *metaapi.Client
}

// startCluster starts the meta members (mutual TLS unless insecure),
// then datanodes datanodes. With lab, datanode i runs on lab's host
// "dn<i>" (its own network namespace, listening on that host's address)
// and the meta members on the bridge's address, where the datanodes
// reach them.
func startCluster(ctx context.Context, cfg *Config, root string, metaArgs []string, lab *netlab.Net) (*cluster, error) {
	host, hosts := "127.0.0.1", []string{"127.0.0.1", "::1", "localhost"}
	c := &cluster{root: root}
	var addrs []string
	if lab != nil {
		host = lab.BridgeAddr()
		hosts = append(hosts, host)
	}
	// The members' sockets, bound here and handed over at their first
	// start (--listen-fd): their addresses are in every member's --peers.
	var ls []*net.TCPListener
	defer func() {
		for _, l := range ls {
			_ = l.Close() // on an error before the handover; closed already after it
		}
	}()
	for range cfg.MetaReplicas {
		// portpick:allow handed over to the member (metagroup.Config.Listeners, --listen-fd), not closed
		l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.ParseIP(host)})
		if err != nil {
			return nil, fmt.Errorf("chaos: meta member's socket: %w", err)
		}
		ls = append(ls, l)
		addrs = append(addrs, l.Addr().String())
	}
	for i := range cfg.Datanodes {
		if lab != nil {
			hosts = append(hosts, lab.Addr(fmt.Sprintf("dn%d", i+1)))
		}
	}
	mcfg := metagroup.Config{Binary: cfg.Binary, Dir: root, Addrs: addrs, Args: metaArgs, Listeners: ls}
	var nodeTLS []tlsconf.Files
	if !cfg.Insecure {
		pki, err := tlsconf.EnsureLocal(root, hosts)
		if err == nil {
			if c.tls, err = pki.Settings(tlsconf.RoleAdmin); err == nil {
				nodeTLS, err = pki.EnsureDatanodes(cfg.Datanodes, hosts)
			}
			if err == nil {
				mcfg.MemberTLS, err = pki.EnsureMembers(tlsconf.RoleMeta, len(addrs), hosts)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("chaos: the run's certificates: %w", err)
		}
		mcfg.TLS, mcfg.ClientTLS = pki.Files(tlsconf.RoleMeta), c.tls
	}
	metaAddr := strings.Join(addrs, ",")
	c.metas = metagroup.New(mcfg)
	err := c.metas.Start(ctx, 0)
	if err == nil {
		c.meta, err = metaapi.NewClient(metaAddr, metaapi.ClientOptions{Timeout: 10 * time.Second, TLS: c.tls})
	}
	if err != nil {
		_ = c.stop() // best effort: err is the error
		return nil, err
	}
	dn := filepath.Join(root, "datanodes")
	lc := localcluster.Config{
		Binary: cfg.Binary, Members: cfg.Datanodes, DataDir: dn, LogDir: filepath.Join(dn, "log"),
		MetaAddr: metaAddr, ProcessGroup: true, ReadyTimeout: processReadyTimeout, NodeTLS: nodeTLS,
	}
	if lab != nil {
		for i := 1; i <= cfg.Datanodes; i++ {
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

// stop stops every process: SIGCONT, SIGTERM, then SIGKILL after a
// bounded wait.
func (c *cluster) stop() error {
	var errs []error
	if c.dns != nil {
		errs = append(errs, c.dns.Stop(processStopTimeout))
	}
	return errors.Join(append(errs, c.metas.Stop(processStopTimeout))...)
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
