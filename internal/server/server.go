// Package server is `spindle server`: the embedded default cluster on one
// machine — the meta service in this process and N datanodes (default 3) as
// child processes (`spindle datanode --meta`), all on 127.0.0.1, all under
// one directory. Separate `spindle meta` and `spindle datanode` processes
// are the same code for real clusters.
//
// Layout of Dir:
//
//	meta/              the meta service's Pebble store
//	datanodes/dn<i>/   datanode i's volume; its log in datanodes/log/dn<i>
//	datanodes/dn<i>.log  its stdout and stderr
//	server.json        {"datanode_addrs": ["127.0.0.1:P1", …]}: the
//	                   datanodes keep their addresses across restarts
//	                   (pipelines name their members by address)
//	s3-credentials.json  the S3 root user, when generated (0600)
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
	"strconv"
	"time"

	"github.com/spindle-store/spindle/internal/localcluster"
	"github.com/spindle-store/spindle/internal/meta"
	"github.com/spindle-store/spindle/internal/metaapi"
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
	// 127.0.0.1:0 picks a free port).
	MetaListen string
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
	ReadyTimeout     time.Duration
	Logger           *slog.Logger
	// S3 configures the S3 gateway Run starts (s3.go).
	S3 S3Config
}

// Server is a running embedded cluster.
type Server struct {
	cfg     Config
	meta    *meta.Server
	cluster *localcluster.Cluster
	client  *metaapi.Client
}

type state struct {
	DatanodeAddrs []string `json:"datanode_addrs"`
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
	st, err := loadState(cfg.Dir, cfg.Datanodes)
	if err != nil {
		return nil, err
	}
	mcfg := cfg.Meta
	mcfg.Dir = filepath.Join(cfg.Dir, "meta")
	mcfg.Listen = cfg.MetaListen
	if mcfg.Logger == nil {
		mcfg.Logger = cfg.Logger
	}
	ms, err := meta.Start(mcfg)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	s := &Server{cfg: cfg, meta: ms}
	s.client, err = metaapi.NewClient(ms.Addr(), metaapi.ClientOptions{})
	if err != nil {
		ms.Close()
		return nil, err
	}
	dn := filepath.Join(cfg.Dir, "datanodes")
	s.cluster, err = localcluster.Start(ctx, localcluster.Config{
		Binary:    cfg.Binary,
		Members:   cfg.Datanodes,
		DataDir:   dn,
		LogDir:    filepath.Join(dn, "log"),
		MetaAddr:  ms.Addr(),
		Addrs:     st.DatanodeAddrs,
		ExtraArgs: cfg.DatanodeArgs,
		NodeArgs:  cfg.DatanodeNodeArgs,
		Env:       cfg.DatanodeEnv,
	})
	if err != nil {
		ms.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	if len(st.DatanodeAddrs) == 0 {
		for _, n := range s.cluster.Nodes() {
			st.DatanodeAddrs = append(st.DatanodeAddrs, n.Addr)
		}
		if err := saveState(cfg.Dir, st); err != nil {
			s.Close()
			return nil, err
		}
	}
	if err := s.waitPipeline(ctx); err != nil {
		s.Close()
		return nil, err
	}
	cfg.Logger.Info("spindle server ready", "meta", ms.Addr(), "datanodes", len(st.DatanodeAddrs), "dir", cfg.Dir)
	return s, nil
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

// MetaAddr is the meta service's address.
func (s *Server) MetaAddr() string { return s.meta.Addr() }

// Meta is a client of the meta service.
func (s *Server) Meta() *metaapi.Client { return s.client }

// Cluster is the datanode processes (for tests: Kill, Restart).
func (s *Server) Cluster() *localcluster.Cluster { return s.cluster }

// Close stops the datanodes (SIGTERM, then SIGKILL after a bounded wait) and
// the meta service.
func (s *Server) Close() error {
	var err error
	if s.cluster != nil {
		err = s.cluster.Stop(localcluster.DefaultStopTimeout)
	}
	if cerr := s.meta.Close(); err == nil {
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
		s.Close()
		return err
	}
	if readyFile != "" {
		if err := meta.WriteReady(readyFile, s.MetaAddr()); err != nil {
			s.Close()
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "spindle server: meta service at %s, %d datanodes, data in %s (Ctrl-C stops)\n", s.MetaAddr(), cfg.datanodes(), cfg.Dir)
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
