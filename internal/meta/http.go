package meta

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spindle-store/spindle/internal/meta/creds"
	"github.com/spindle-store/spindle/internal/meta/httpio"
	"github.com/spindle-store/spindle/internal/meta/namespace"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/meta/versions"
	"github.com/spindle-store/spindle/internal/metaapi"
	api "github.com/spindle-store/spindle/internal/metaapi/authz"
	"github.com/spindle-store/spindle/internal/readyfile"
)

// ShutdownTimeout bounds the wait for in-flight requests at Close.
const ShutdownTimeout = 5 * time.Second

// Handler serves the routes of metaapi and /metrics.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	route := func(pattern, name string, h func(w http.ResponseWriter, r *http.Request) (any, int, error)) {
		mux.Handle(pattern, s.guardInstrumented(name, h))
	}
	route("POST /v1/heartbeat", "heartbeat", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var hb metaapi.Heartbeat
		if err := httpio.DecodeBody(w, r, &hb); err != nil {
			return nil, 0, err
		}
		caller, err := callerOf(r)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: %v", metaapi.ErrForbidden, err)
		}
		resp, err := s.HeartbeatFrom(caller, &hb)
		return resp, http.StatusOK, err
	})
	route("PUT /v1/buckets/{bucket}", "create_bucket", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		b, err := s.gate.CreateBucket(r, r.PathValue("bucket")) // owned by the caller
		return b, http.StatusCreated, err
	})
	route("GET /v1/buckets", "list_buckets", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		l, err := s.ListBuckets()
		if err == nil {
			l, err = s.gate.VisibleBuckets(r, l) // the caller's buckets and those it has grants on
		}
		return l, http.StatusOK, err
	})
	route("DELETE /v1/buckets/{bucket}", "delete_bucket", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		bucket := r.PathValue("bucket")
		if err := s.gate.Authorize(r, "delete_bucket", api.Admin, bucket, ""); err != nil {
			return nil, 0, err
		}
		err := s.DeleteBucket(bucket)
		s.gate.Record(s.gate.Who(r), "delete_bucket", bucket, "", err)
		return nil, http.StatusNoContent, err
	})
	route("POST /v1/allocate", "allocate", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req metaapi.AllocateRequest
		if err := httpio.DecodeBody(w, r, &req); err != nil {
			return nil, 0, err
		}
		if err := s.gate.Authorize(r, "allocate", api.Write, req.Bucket, req.Key); err != nil {
			return nil, 0, err
		}
		resp, err := s.Allocate(&req)
		if err == nil {
			err = s.tokens.Allocation(r, resp) // block tokens (tokenkeys)
		}
		return resp, http.StatusOK, err
	})
	route("POST "+metaapi.CommitsRoute, "commit_batch", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		body, err := httpio.ReadBody(w, r)
		if err != nil {
			return nil, 0, err
		}
		items, err := metaapi.DecodeCommitBatch(body)
		if err != nil {
			return nil, 0, err
		}
		id := s.gate.Who(r)
		check, d := s.gate.CommitCheck(id)
		res, err := s.CommitKeysAs(items, check)
		s.gate.Flush(d)
		for i := range res {
			if res[i].Error == nil {
				s.gate.Record(id, "commit_key", items[i].Bucket, items[i].Key, nil)
			}
		}
		return &metaapi.CommitBatchResult{Results: res}, http.StatusOK, err
	})
	route("POST "+metaapi.AllocationsRoute, "allocate_batch", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req metaapi.AllocateBatch
		if err := httpio.DecodeBody(w, r, &req); err != nil {
			return nil, 0, err
		}
		for _, a := range req.Requests {
			if err := s.gate.Authorize(r, "allocate", api.Write, a.Bucket, a.Key); err != nil {
				return nil, 0, err
			}
		}
		res, err := s.AllocateMany(req.Requests)
		s.tokens.Allocations(r, res) // block tokens (tokenkeys)
		return &metaapi.AllocateBatchResult{Results: res}, http.StatusOK, err
	})
	route("POST "+metaapi.GetsRoute, "get_batch", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req metaapi.GetBatch
		if err := httpio.DecodeBody(w, r, &req); err != nil {
			return nil, 0, err
		}
		refused := make([]error, len(req.Keys))
		for i, k := range req.Keys {
			refused[i] = s.gate.Authorize(r, "get_key", api.Read, k.Bucket, k.Key)
		}
		res, err := s.GetKeys(req.Keys)
		for i := range res {
			if refused[i] != nil {
				res[i] = metaapi.GetResult{Error: state.APIError("get "+req.Keys[i].Bucket+"/"+req.Keys[i].Key, refused[i])}
			}
		}
		s.tokens.Keys(r, res) // block tokens (tokenkeys), for the keys the grants let through
		return httpio.GetsAnswer(res), http.StatusOK, err
	})
	route("GET /v1/list/{bucket}", "list_keys", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		q := r.URL.Query()
		o := namespace.ListOptions{Prefix: q.Get("prefix"), StartAfter: q.Get("start_after"), Delimiter: q.Get("delimiter")}
		if v := q.Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, 0, fmt.Errorf("%w: limit %q is not a number", metaapi.ErrInvalid, v)
			}
			o.Limit = n
		}
		if err := s.gate.Authorize(r, "list_keys", api.Read, r.PathValue("bucket"), o.Prefix); err != nil {
			return nil, 0, err
		}
		l, err := s.List(r.PathValue("bucket"), o)
		return l, http.StatusOK, err
	})
	route("GET /v1/nodes", "nodes", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		l, err := s.Nodes()
		return l, http.StatusOK, err
	})
	route("GET /v1/pipelines", "pipelines", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		l, err := s.Pipelines()
		return l, http.StatusOK, err
	})
	route("GET /v1/containers", "containers", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		l, err := s.Containers()
		return l, http.StatusOK, err
	})
	route("GET /v1/replication", "replication", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		st, err := s.Replication()
		return st, http.StatusOK, err
	})
	route("POST /v1/safemode/exit", "safemode_exit", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		st, err := s.ExitSafeMode()
		return st, http.StatusOK, err
	})
	s.routeS3(route)
	s.gate.RouteGrants(route, httpio.DecodeBody) // package access
	s.routeS3Conf(route)                         // http_s3conf.go
	s.routeOps(route)                            // ops.go
	s.routeJoin(route)                           // join.go
	s.routeCerts(route)                          // certs.go
	s.ec.Routes(route, s.gate.AsBucketAdmin)     // package ecmeta
	s.lc.Routes(route, s.Metrics.Reg)            // package lcmeta
	mux.Handle("GET /metrics", s.guard("metrics", promhttp.HandlerFor(s.Metrics.Reg, promhttp.HandlerOpts{})))
	mux.Handle("GET /v1/admin/backup", s.guard("backup", s.backupHandler())) // backup.go
	s.raftRoutes(mux)
	creds.Routes(route, s.State, s.MetaStatus, s.SetUserKeys, s.ResealUsers)                                // every kind of record sealed with the KEK adds its re-sealer
	versions.Routes(route, namespace.Versions{Namespace: s.Namespace}, s.gate, s.tokens, httpio.DecodeBody) // S3 object versions
	commitKey := s.guardInstrumented("commit_key", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		bucket, key, err := keyPath(r)
		if err != nil {
			return nil, 0, err
		}
		var ck metaapi.CommitKey
		if r.Header.Get("Content-Type") == metaapi.InlineContentType {
			err = httpio.DecodeInlineBody(w, r, &ck)
		} else {
			err = httpio.DecodeBody(w, r, &ck)
		}
		if err != nil {
			return nil, 0, err
		}
		id := s.gate.Who(r)
		check, d := s.gate.CommitCheck(id)
		ki, err := s.CommitKeyAs(bucket, key, &ck, check)
		s.gate.Flush(d)
		if err == nil {
			s.gate.Record(id, "commit_key", bucket, key, nil)
		}
		return ki, http.StatusOK, err
	})
	getKey := s.guardInstrumented("get_key", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		bucket, key, err := keyPath(r)
		if err != nil {
			return nil, 0, err
		}
		if err := s.gate.Authorize(r, "get_key", api.Read, bucket, key); err != nil {
			return nil, 0, err
		}
		ki, err := s.GetKey(bucket, key)
		if err == nil {
			err = s.tokens.Key(r, ki) // block tokens (tokenkeys)
		}
		if err == nil && len(ki.Inline) > 0 && strings.Contains(r.Header.Get("Accept"), metaapi.InlineContentType) {
			value := ki.Inline
			ki.Inline = nil
			return httpio.InlineAnswer{KI: ki, Value: value}, http.StatusOK, nil
		}
		return ki, http.StatusOK, err
	})
	deleteKey := s.guardInstrumented("delete_key", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		bucket, key, err := keyPath(r)
		if err != nil {
			return nil, 0, err
		}
		if err := s.gate.Authorize(r, "delete_key", api.Delete, bucket, key); err != nil {
			return nil, 0, err
		}
		err = s.DeleteKey(bucket, key)
		s.gate.Record(s.gate.Who(r), "delete_key", bucket, key, err)
		return nil, http.StatusNoContent, err
	})
	// Key routes bypass the mux: it would clean (redirect) key names such
	// as "a//b" or "dir/", which are valid.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.EscapedPath(), keyRoute) {
			mux.ServeHTTP(w, r)
			return
		}
		switch r.Method {
		case http.MethodPost:
			commitKey.ServeHTTP(w, r)
		case http.MethodGet:
			getKey.ServeHTTP(w, r)
		case http.MethodDelete:
			deleteKey.ServeHTTP(w, r)
		default:
			w.Header().Set("Allow", "GET, POST, DELETE")
			metaapi.WriteError(w, http.StatusMethodNotAllowed, metaapi.CodeInvalid, fmt.Sprintf("method %s not allowed on %s", r.Method, keyRoute))
		}
	})
}

const keyRoute = "/v1/keys/"

// keyPath splits /v1/keys/{bucket}/{key...}; both parts are path-escaped
// (metaapi.KeyPath builds it).
func keyPath(r *http.Request) (bucket, key string, err error) {
	rest := strings.TrimPrefix(r.URL.EscapedPath(), keyRoute)
	eb, ek, ok := strings.Cut(rest, "/")
	if !ok {
		return "", "", fmt.Errorf("%w: want %s{bucket}/{key}", metaapi.ErrInvalid, keyRoute)
	}
	if bucket, err = url.PathUnescape(eb); err == nil {
		key, err = url.PathUnescape(ek)
	}
	if err != nil {
		return "", "", fmt.Errorf("%w: bad escaping in %s: %v", metaapi.ErrInvalid, r.URL.EscapedPath(), err)
	}
	return bucket, key, nil
}

// guardInstrumented is instrument behind guard (auth.go), under one
// route name.
func (s *Service) guardInstrumented(route string, h func(w http.ResponseWriter, r *http.Request) (any, int, error)) http.Handler {
	return s.guard(route, s.instrument(route, h))
}

// instrument turns a handler returning (body, status, error) into an
// http.Handler that writes JSON or an Error body and observes the latency.
func (s *Service) instrument(route string, h func(w http.ResponseWriter, r *http.Request) (any, int, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		var body any
		var status int
		release, err := s.bodies.admit(w, r)
		if err == nil {
			body, status, err = h(w, r)
			release()
		}
		if err != nil {
			var code string
			code, status = metaapi.CodeOf(err)
			if status == http.StatusInternalServerError {
				s.Log.Error("request failed", "route", route, "err", err)
			}
			var nl *metaapi.NotLeaderError
			if errors.As(err, &nl) {
				metaapi.WriteErrorBody(w, status, metaapi.Error{Code: code, Message: err.Error(), NotLeader: true, Leader: nl.LeaderAddr})
			} else {
				metaapi.WriteErrorBody(w, status, metaapi.ErrorFor(err))
			}
		} else {
			httpio.WriteJSON(w, status, body)
		}
		s.Metrics.Requests.WithLabelValues(route, strconv.Itoa(status)).Observe(time.Since(start).Seconds())
	})
}

// Server is a Service served over HTTP, with the cluster manager ticking.
type Server struct {
	svc    *Service
	srv    *http.Server
	ln     net.Listener
	stop   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
	served chan error
}

// Start listens on cfg.Listen (or cfg.Listener), opens the service in
// cfg.Dir and serves. The listener serves from the start: while the
// service opens (its store loaded, its raft log replayed, and at the
// bootstrap of an empty directory the other members asked whether it
// lost one: raftgroup.rejoinTerm) every request is answered at once as a
// member without a leader would be (UNAVAILABLE, not the leader), so
// that members started together ask each other without waiting out a
// timeout on a listener nobody serves yet (2-8 s per member before).
func Start(cfg state.Config) (*Server, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ln := cfg.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return nil, fmt.Errorf("meta: listen: %w", err)
		}
	}
	// Addr stays the TCP listener's; every connection it accepts must
	// complete a mutual TLS handshake before a request is read.
	tlsSettings := cfg.TLS
	if cfg.JoinCA != nil {
		tlsSettings = tlsSettings.WithJoin() // join.go: a joining datanode has no certificate yet
	}
	ln = tlsSettings.Listener(ln)
	h := &httpio.Opening{}
	s := &Server{ln: ln, stop: make(chan struct{}), served: make(chan error, 1),
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}}
	s.wg.Go(func() {
		err := s.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.served <- err
	})
	svc, err := Open(cfg)
	if err != nil {
		_ = s.srv.Close() // closes the listener: nothing was served but "opening"
		s.wg.Wait()
		return nil, err
	}
	s.svc = svc
	cfg = svc.Cfg
	if svc.rep != nil {
		// Shutdown waits for active connections: the raft streams this
		// member receives end at once.
		s.srv.RegisterOnShutdown(svc.rep.StopStreams)
	}
	h.Serve(svc.Handler())
	if cfg.TickInterval > 0 {
		s.wg.Go(func() { s.tick(cfg.TickInterval) })
	}
	s.wg.Go(func() { svc.lc.Run(s.stop, svc.Serving) }) // S3 lifecycle rules, on the leader (package lcmeta)
	if cfg.TLS.Enabled() {
		s.watchCerts() // certs.go: renewal, the deny-list in force
	}
	if !cfg.TLS.Enabled() {
		svc.Log.Warn("meta service serving WITHOUT TLS (--insecure): nobody is authenticated: anyone who reaches its address can call its API, administration and deletions included (no role is checked; with --admin-token-file, administration and deletions need its bearer token)", "addr", s.Addr(), "admin_token", cfg.AdminToken != "")
	}
	svc.Log.Info("meta service serving", "addr", s.Addr(), "dir", cfg.Dir, "tls", cfg.TLS.Mode())
	return s, nil
}

func (s *Server) tick(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			if !s.svc.Serving() {
				continue // a replicated member ticks only while it serves as leader
			}
			if err := s.svc.Tick(); err != nil {
				s.svc.Log.Error("cluster manager tick", "err", err)
			}
		}
	}
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Service is the served state.
func (s *Server) Service() *Service { return s.svc }

// Close stops serving (waiting up to ShutdownTimeout for requests in
// flight), stops the ticker and closes the store.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() {
		close(s.stop)
		ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
		defer cancel()
		if serr := s.srv.Shutdown(ctx); serr != nil {
			// Past ShutdownTimeout the connections left are cut; Close's
			// error is the listeners', which Shutdown closed already.
			_ = s.srv.Close()
		}
		s.wg.Wait()
		err = s.svc.Close()
	})
	return err
}

// Run serves until ctx ends (a clean stop: nil) or serving fails. Once
// serving it writes "ADDR\nPID\n" to cfg.ReadyFile (atomically).
func Run(ctx context.Context, cfg state.Config) error {
	s, err := Start(cfg)
	if err != nil {
		return err
	}
	if cfg.ReadyFile != "" {
		if err := WriteReady(cfg.ReadyFile, s.Addr()); err != nil {
			return errors.Join(err, s.Close())
		}
	}
	var serr error
	select {
	case <-ctx.Done():
	case serr = <-s.served:
		if serr == nil {
			serr = errors.New("meta: server stopped")
		}
	}
	if cerr := s.Close(); serr == nil {
		serr = cerr
	}
	if serr == nil {
		s.svc.Log.Info("meta service stopped")
	}
	return serr
}

// WriteReady writes "ADDR\nPID\n" to path atomically (internal/readyfile).
func WriteReady(path, addr string) error { return readyfile.Write(path, addr) }
