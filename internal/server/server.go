// Package server is `spindle server`: the embedded default cluster on one
// machine — the meta service in this process and N datanodes (default 3) as
// child processes (`spindle datanode --meta`), all on 127.0.0.1, all under
// one directory. Separate `spindle meta` and `spindle datanode` processes
// are the same code for real clusters.
//
// With Config.MetaReplicas > 1 the meta service is a raft group of that
// many `spindle meta` child processes instead (metagroup.go), and every
// client (datanodes, S3 gateway, the address printed and written to the
// ready file) gets all the members' addresses.
//
// Layout of Dir:
//
//	meta/              the meta service's Pebble store (one replica)
//	meta<i>/, meta<i>.log  member i's directory and log (MetaReplicas > 1)
//	datanodes/dn<i>/   datanode i's volume; its log in datanodes/log/dn<i>
//	datanodes/dn<i>.log  its stdout and stderr
//	server.json        {"datanode_addrs": ["127.0.0.1:P1", …], "meta_addrs":
//	                   […]}: the datanodes' addresses at the last start
//	                   (each start binds new ones, port 0; they register
//	                   them) and the meta members', kept across restarts
//	                   (the meta raft group names its members by address)
//	s3-credentials.json  the S3 root user, when generated (0600)
//	meta-kek.json      the key encryption key sealing the meta store's S3
//	                   secrets (0600; every member's, package kek)
//	tls/ca/ca.crt, ca.key  the cluster CA (key 0600; never replaced)
//	tls/local-ROLE.{crt,key}  a pair per role: meta, datanode, s3, admin
//
// Every connection is mutual TLS 1.3 with those pairs (the meta service,
// the datanodes, the gateway's cluster connections; the gateway's S3 port
// is HTTPS), unless Config.Insecure: plaintext everywhere, logged at WARN.
// With Config.ClientProfile the server writes, once ready, the client
// profile by which commands given its meta address reach it.
//
// Run also serves S3 (internal/s3gw) on Config.S3.Listen, its root user
// from Config.S3 or generated once into s3-credentials.json.
//
// Invariants: the datanodes die with the server (parent-death signal); a
// restarted server reuses the datanodes' addresses and directories, so the
// namespace, the pipelines and the data are as they were.
//
// Concurrency: a Server's methods may be called from any goroutine.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spindle-store/spindle/internal/certwatch"
	"github.com/spindle-store/spindle/internal/console"
	"github.com/spindle-store/spindle/internal/localcluster"
	"github.com/spindle-store/spindle/internal/meta"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
	"github.com/spindle-store/spindle/internal/vfs"
)

// Defaults.
const (
	DefaultDatanodes = 3
	// DefaultReadyTimeout bounds the wait for the first usable pipeline.
	DefaultReadyTimeout = 60 * time.Second
)

// Config configures an embedded cluster.
type Config struct {
	// Dir holds everything (created when missing). Required.
	Dir string
	// Datanodes is the number of datanode processes (≥ 3).
	Datanodes int
	// MetaListen is the meta service's address (default 127.0.0.1:9860;
	// with port 0 the service binds a port of its own: MetaAddr says
	// which); member 1's with MetaReplicas > 1.
	MetaListen string
	// MetaReplicas is the number of meta members (default 1: the meta
	// service in this process; more: child processes, metagroup.go).
	MetaReplicas int
	// MetaArgs are added to every meta member's command line
	// (MetaReplicas > 1; Meta is not used then).
	MetaArgs []string
	// Binary is the spindle executable for the datanodes (default: this
	// process's executable).
	Binary string
	// Meta overrides settings of the meta service (its Dir and Listen are
	// set from the fields above).
	Meta meta.Config
	// DatanodeArgs are added to every datanode's command line.
	DatanodeArgs []string
	// DatanodeEnv is added to the datanodes' environment.
	DatanodeEnv []string
	// DatanodeNodeArgs, when set, returns more arguments for datanode id
	// (1-based).
	DatanodeNodeArgs func(id int) []string
	// DatanodeOnLaunch, when set, is called with each datanode's ID and
	// process ID as it is started (localcluster.Config.OnLaunch).
	DatanodeOnLaunch func(id, pid int)
	ReadyTimeout     time.Duration
	Logger           *slog.Logger
	// S3 configures the S3 gateway Run starts (s3.go).
	S3 S3Config
	// Console configures the web console Run starts (console.go);
	// ConsoleSampleEvery its metrics sampler's period (0: the default).
	Console            console.Options
	ConsoleSampleEvery time.Duration
	// Insecure runs every connection in plaintext (--insecure). Otherwise
	// (the default) the server makes its PKI under Dir/tls at the first
	// start (tlsconf.EnsureLocal: a CA, a certificate per role, keys 0600)
	// and every connection is mutual TLS 1.3: the meta API and raft, the
	// datanodes' data path, raft and container copies; the S3 gateway
	// serves HTTPS with the s3 certificate.
	Insecure bool
	// ClientProfile writes, once the server is ready, the client profile
	// the command line finds by meta address (tlsconf.WriteClientProfile):
	// after `spindle server`, `spindle put` needs no flag.
	ClientProfile bool
	// CertValidity is the lifetime of the certificates the server makes
	// and its meta service issues (renewals; 0:
	// tlsconf.DefaultCertValidity). Every process renews its own at 2/3.
	CertValidity time.Duration
}

// Server is a running embedded cluster.
type Server struct {
	cfg Config
	// pki is the server's PKI (zero with Insecure); adminTLS the
	// settings of its own client and of the local operator's.
	pki      tlsconf.Local
	adminTLS *tlsconf.Settings
	meta     *meta.Server // nil with MetaReplicas > 1
	group    *MetaProcs   // nil with one meta replica
	// metaAddr is every meta member's address, comma-separated.
	metaAddr string
	cluster  *localcluster.Cluster
	client   *metaapi.Client
	// watch renews adminTLS's pair until stopWatch.
	watch     sync.WaitGroup
	stopWatch func()
}

// state is server.json. DatanodeAddrs are the datanodes' addresses at the
// last start (their count is checked; each start binds new ports, port 0:
// the datanodes register their addresses with the meta service);
// MetaAddrs are the meta members' (MetaReplicas > 1), kept: a member's
// raft identity is its address.
type state struct {
	DatanodeAddrs []string `json:"datanode_addrs"`
	MetaAddrs     []string `json:"meta_addrs,omitempty"`
}

// Start starts the meta service and the datanodes and waits until a
// pipeline has a leader (or ReadyTimeout).
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("server: --dir is required")
	}
	if cfg.Datanodes == 0 {
		cfg.Datanodes = DefaultDatanodes
	}
	if cfg.Datanodes < 3 || cfg.Datanodes > localcluster.MaxMembers {
		return nil, fmt.Errorf("server: %d datanodes, want 3..%d (a pipeline has 3)", cfg.Datanodes, localcluster.MaxMembers)
	}
	if cfg.MetaListen == "" {
		cfg.MetaListen = "127.0.0.1:9860"
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = DefaultReadyTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("server: finding the spindle binary: %w", err)
		}
		cfg.Binary = exe
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if cfg.MetaReplicas == 0 {
		cfg.MetaReplicas = 1
	}
	if cfg.MetaReplicas < 1 || cfg.MetaReplicas > MaxMetaReplicas {
		return nil, fmt.Errorf("server: --meta-replicas %d: want 1..%d", cfg.MetaReplicas, MaxMetaReplicas)
	}
	st, err := loadState(cfg.Dir, cfg.Datanodes)
	if err != nil {
		return nil, err
	}
	if err := checkMetaLayout(cfg, st); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg}
	var metaTLS *tlsconf.Settings
	if !cfg.Insecure {
		if s.pki, err = tlsconf.EnsureLocalValidity(cfg.Dir, localHosts(cfg), cfg.CertValidity); err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		if metaTLS, err = s.pki.Settings(tlsconf.RoleMeta); err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		if s.adminTLS, err = s.pki.Settings(tlsconf.RoleAdmin); err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
	} else {
		cfg.Logger.Warn("spindle server running WITHOUT TLS (--insecure): every port accepts plaintext connections from anyone who reaches it, and nobody is authenticated: no role is checked, administration included")
	}
	if cfg.MetaReplicas > 1 {
		newAddrs := len(st.MetaAddrs) == 0
		var lns []*net.TCPListener
		if newAddrs {
			if lns, err = metaListeners(cfg.MetaListen, cfg.MetaReplicas); err != nil {
				return nil, err
			}
			for _, ln := range lns {
				st.MetaAddrs = append(st.MetaAddrs, ln.Addr().String())
			}
		}
		var members []tlsconf.Files
		if !cfg.Insecure {
			if members, err = s.pki.EnsureMembers(tlsconf.RoleMeta, cfg.MetaReplicas, localHosts(cfg)); err != nil {
				return nil, fmt.Errorf("server: %w", err)
			}
		}
		if s.group, err = startMetaGroup(ctx, cfg, st.MetaAddrs, lns, members, s.adminTLS); err != nil {
			return nil, err
		}
		s.metaAddr = strings.Join(st.MetaAddrs, ",")
		if newAddrs && len(st.DatanodeAddrs) > 0 {
			if err := saveState(cfg.Dir, st); err != nil {
				stopQuietly(s.closeMeta)
				return nil, err
			}
		}
	} else {
		mcfg := cfg.Meta
		mcfg.Dir = filepath.Join(cfg.Dir, "meta")
		mcfg.Listen = cfg.MetaListen
		mcfg.TLS = metaTLS
		mcfg.CertValidity = cfg.CertValidity
		if !cfg.Insecure && mcfg.JoinCA == nil {
			// The local CA admits datanodes that join with a token
			// (spindle admin join-token).
			if mcfg.JoinCA, err = tlsconf.LoadCA(filepath.Dir(s.pki.CA)); err != nil {
				return nil, fmt.Errorf("server: %w", err)
			}
		}
		if mcfg.Logger == nil {
			mcfg.Logger = cfg.Logger
		}
		if s.meta, err = meta.Start(mcfg); err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		s.metaAddr = s.meta.Addr()
	}
	s.client, err = metaapi.NewClient(s.metaAddr, metaapi.ClientOptions{TLS: s.adminTLS})
	if err != nil {
		stopQuietly(s.closeMeta)
		return nil, err
	}
	// Each datanode has a certificate of its own: the meta service binds
	// it to the datanode's UUID, its pipeline peers to its member ID.
	var nodeTLS []tlsconf.Files
	if !cfg.Insecure {
		if nodeTLS, err = s.pki.EnsureDatanodes(cfg.Datanodes, localHosts(cfg)); err != nil {
			stopQuietly(s.closeMeta)
			return nil, fmt.Errorf("server: %w", err)
		}
	}
	dn := filepath.Join(cfg.Dir, "datanodes")
	s.cluster, err = localcluster.Start(ctx, localcluster.Config{
		Binary:    cfg.Binary,
		Members:   cfg.Datanodes,
		DataDir:   dn,
		LogDir:    filepath.Join(dn, "log"),
		MetaAddr:  s.metaAddr,
		ExtraArgs: cfg.DatanodeArgs,
		NodeArgs:  cfg.DatanodeNodeArgs,
		OnLaunch:  cfg.DatanodeOnLaunch,
		Env:       cfg.DatanodeEnv,
		TLS:       s.files(tlsconf.RoleDatanode),
		NodeTLS:   nodeTLS,
	})
	if err != nil {
		stopQuietly(s.closeMeta)
		return nil, fmt.Errorf("server: %w", err)
	}
	// The datanodes bound port 0 (localcluster): their addresses are new.
	st.DatanodeAddrs = s.cluster.Addrs()
	if err := saveState(cfg.Dir, st); err != nil {
		stopQuietly(s.Close)
		return nil, err
	}
	if err := s.waitPipeline(ctx); err != nil {
		stopQuietly(s.Close)
		return nil, err
	}
	wctx, wstop := context.WithCancel(context.Background())
	s.stopWatch = func() { wstop(); s.watch.Wait() }
	certwatch.Start(wctx, &s.watch, s.adminTLS, s.client, cfg.Logger, nil) // the local operator's pair (the client profile's) renewed
	if cfg.ClientProfile {
		if err := s.writeClientProfile(); err != nil {
			stopQuietly(s.Close)
			return nil, err
		}
	}
	cfg.Logger.Info("spindle server ready", "meta", s.metaAddr, "datanodes", len(st.DatanodeAddrs), "dir", cfg.Dir, "tls", s.adminTLS.Mode())
	return s, nil
}

// localHosts are the names the server's certificates must carry: loopback,
// and the hosts of its meta and S3 addresses.
func localHosts(cfg Config) []string {
	hosts := []string{"127.0.0.1", "::1", "localhost"}
	for _, a := range []string{cfg.MetaListen, cfg.S3.Listen} {
		if h, _, err := net.SplitHostPort(a); err == nil && h != "" && !slices.Contains(hosts, h) {
			if ip := net.ParseIP(h); ip == nil || !ip.IsUnspecified() {
				hosts = append(hosts, h)
			}
		}
	}
	return hosts
}

// files are role r's certificate, key and CA (zero with Insecure).
func (s *Server) files(r tlsconf.Role) tlsconf.Files {
	if s.cfg.Insecure {
		return tlsconf.Files{}
	}
	return s.pki.Files(r)
}

// ClientTLS is the TLS settings of a client of this server (the local
// operator's admin certificate; nil with Insecure).
func (s *Server) ClientTLS() *tlsconf.Settings { return s.adminTLS }

// ClientArgs are the flags a `spindle` command needs to reach this server:
// --tls-cert, --tls-key and --tls-ca of the admin certificate, or
// --insecure.
func (s *Server) ClientArgs() []string { return s.files(tlsconf.RoleAdmin).Args() }

// CABundle is the CA certificate S3 clients verify the gateway by (empty
// with Insecure).
func (s *Server) CABundle() string { return s.pki.CA }

// writeClientProfile tells the command line how to reach this server.
func (s *Server) writeClientProfile() error {
	f := s.files(tlsconf.RoleAdmin)
	p := tlsconf.ClientProfile{Meta: s.metaAddr, Insecure: s.cfg.Insecure, Cert: f.Cert, Key: f.Key, CA: f.CA}
	if s.cfg.S3.Listen != S3Off {
		p.S3Endpoint = "http://" + s.s3Listen()
		if !s.cfg.Insecure {
			p.S3Endpoint, p.S3CABundle = "https://"+s.s3Listen(), s.pki.CA
		}
	}
	path, err := tlsconf.WriteClientProfile(p, metaapi.SplitAddrs(s.metaAddr))
	if err != nil {
		return fmt.Errorf("server: client profile: %w", err)
	}
	s.cfg.Logger.Info("client profile written: spindle commands given this meta address find it", "path", path)
	return nil
}

// waitPipeline polls (bounded) until an OPEN pipeline has a leader.
func (s *Server) waitPipeline(ctx context.Context) error {
	deadline := time.Now().Add(s.cfg.ReadyTimeout)
	for {
		pl, err := s.client.Pipelines(ctx)
		if err == nil {
			for _, p := range pl {
				// A leader is not enough: a member may not have reported
				// the pipeline it just joined, and Allocate would refuse.
				if p.Allocatable && p.Leader != 0 {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("server: no allocatable pipeline with a leader within %v (last error: %v); datanode logs in %s", s.cfg.ReadyTimeout, err, filepath.Join(s.cfg.Dir, "datanodes"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// MetaAddr is the meta service's address (every member's, comma-separated,
// with MetaReplicas > 1).
func (s *Server) MetaAddr() string { return s.metaAddr }

// MetaGroup is the meta member processes (nil with one replica; tests:
// Kill, Restart).
func (s *Server) MetaGroup() *MetaProcs { return s.group }

// closeMeta stops the meta service (or its members).
func (s *Server) closeMeta() error {
	if s.group != nil {
		return s.group.stop()
	}
	return s.meta.Close()
}

// stopQuietly stops, best effort, what a start that failed had started:
// the start's error is the one returned; stop's own says at most that a
// process was killed for not stopping in time, and it ended all the same.
func stopQuietly(stop func() error) { _ = stop() }

// MaxMetaReplicas bounds --meta-replicas.
const MaxMetaReplicas = 7

// checkMetaLayout refuses a Dir made with another number of meta replicas
// (one store in meta/, or members in meta<i>/ and server.json).
func checkMetaLayout(cfg Config, st state) error {
	_, err := os.Stat(filepath.Join(cfg.Dir, "meta"))
	single := err == nil
	switch {
	case cfg.MetaReplicas > 1 && single:
		return fmt.Errorf("server: %s holds a single meta service (meta/): it cannot become %d replicas", cfg.Dir, cfg.MetaReplicas)
	case cfg.MetaReplicas == 1 && len(st.MetaAddrs) > 0:
		return fmt.Errorf("server: %s was made with %d meta replicas: start it with --meta-replicas %d", cfg.Dir, len(st.MetaAddrs), len(st.MetaAddrs))
	case cfg.MetaReplicas > 1 && len(st.MetaAddrs) > 0 && len(st.MetaAddrs) != cfg.MetaReplicas:
		return fmt.Errorf("server: %s was made with %d meta replicas, not %d (use spindle admin meta add|remove)", cfg.Dir, len(st.MetaAddrs), cfg.MetaReplicas)
	}
	return nil
}

// Meta is a client of the meta service.
func (s *Server) Meta() *metaapi.Client { return s.client }

// Cluster is the datanode processes (for tests: Kill, Restart).
func (s *Server) Cluster() *localcluster.Cluster { return s.cluster }

// Close stops the datanodes (SIGTERM, then SIGKILL after a bounded wait) and
// the meta service.
func (s *Server) Close() error {
	if s.stopWatch != nil {
		s.stopWatch()
	}
	var err error
	if s.cluster != nil {
		err = s.cluster.Stop(localcluster.DefaultStopTimeout)
	}
	if cerr := s.closeMeta(); err == nil {
		err = cerr
	}
	return err
}

// Run runs the server until ctx ends; it writes "META_ADDR\nPID\n" to
// readyFile once ready.
func Run(ctx context.Context, cfg Config, readyFile string) error {
	s, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	gwCtx, stopGW := context.WithCancel(ctx)
	defer stopGW()
	gw, err := s.startS3(gwCtx)
	if err != nil {
		stopQuietly(s.Close)
		return err
	}
	_, stopConsole, err := s.startConsole()
	if err != nil {
		stopGW()
		stopQuietly(s.Close)
		return err
	}
	defer stopConsole()
	if readyFile != "" {
		if err := meta.WriteReady(readyFile, s.MetaAddr()); err != nil {
			stopQuietly(s.Close)
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "spindle server: meta service at %s, %d datanodes, data in %s (Ctrl-C stops)\n", s.MetaAddr(), cfg.datanodes(), cfg.Dir)
	if s.group != nil {
		fmt.Fprintf(os.Stderr, "spindle server: %d meta replicas; clients: export SPINDLE_META=%s\n", len(s.group.addrs), s.MetaAddr())
	}
	var gwErr error
	select {
	case <-ctx.Done():
	case gwErr = <-gw: // nil channel when no gateway: never
	}
	stopGW()
	if gw != nil && gwErr == nil {
		gwErr = <-gw
	}
	if err := s.Close(); err != nil {
		return err
	}
	return gwErr
}

func (c Config) datanodes() int {
	if c.Datanodes == 0 {
		return DefaultDatanodes
	}
	return c.Datanodes
}

func loadState(dir string, datanodes int) (state, error) {
	var st state
	b, err := os.ReadFile(filepath.Join(dir, "server.json"))
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("server: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("server: server.json: %w", err)
	}
	if len(st.DatanodeAddrs) != datanodes {
		return st, fmt.Errorf("server: %s was made with %d datanodes, not %d (the count cannot change)", dir, len(st.DatanodeAddrs), datanodes)
	}
	for _, a := range st.DatanodeAddrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil || host != "127.0.0.1" {
			return st, fmt.Errorf("server: server.json: datanode address %q is not 127.0.0.1:PORT", a)
		}
		if _, err := strconv.Atoi(port); err != nil {
			return st, fmt.Errorf("server: server.json: datanode address %q", a)
		}
	}
	return st, nil
}

func saveState(dir string, st state) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := vfs.WriteFileAtomic(vfs.Default, filepath.Join(dir, "server.json"), append(b, '\n')); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	return nil
}
