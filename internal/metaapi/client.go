package metaapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spindle-store/spindle/internal/backoff"
	"github.com/spindle-store/spindle/internal/metaapi/allocpool"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// Client defaults and bounds.
const (
	// DefaultClientTimeout bounds one attempt of a request.
	DefaultClientTimeout = 10 * time.Second
	// DefaultClientAttempts bounds the tries of an idempotent request.
	DefaultClientAttempts = 3
	// DefaultClientBackoff is the wait before the first retry; it doubles
	// up to MaxClientBackoff.
	DefaultClientBackoff = 100 * time.Millisecond
	MaxClientBackoff     = 2 * time.Second
	// DefaultFailoverTimeout bounds the retries of a request to a
	// replicated meta service (several addresses) while it finds the
	// leader: an election takes a few seconds at most.
	DefaultFailoverTimeout = 20 * time.Second
	// MaxFailoverAttempts bounds the tries of one request across the
	// members of a replicated meta service.
	MaxFailoverAttempts = 200
	// failoverMinBackoff and failoverMaxBackoff bound the jittered pause
	// between tries while following the leader.
	failoverMinBackoff = 20 * time.Millisecond
	failoverMaxBackoff = 500 * time.Millisecond
	// MaxResponseBytes bounds a response body the client reads.
	MaxResponseBytes = 64 << 20
	// maxErrorBodyBytes bounds an error body.
	maxErrorBodyBytes = 1 << 20
)

// ClientOptions configure a Client; zero values take the defaults.
type ClientOptions struct {
	// Timeout bounds one attempt (DefaultClientTimeout).
	Timeout time.Duration
	// Attempts bounds the tries of a request (DefaultClientAttempts); a
	// non-idempotent one is tried again only after a refusal that did
	// nothing (BUSY, or NOT_LEADER). 1 disables retries.
	Attempts int
	// Backoff is the wait before the first retry (DefaultClientBackoff).
	Backoff time.Duration
	// HTTPClient, when set, carries the requests (its own Timeout applies
	// too).
	HTTPClient *http.Client
	// FailoverTimeout bounds the retries of one request across the members
	// of a replicated meta service (DefaultFailoverTimeout); with one
	// address, Attempts bounds them.
	FailoverTimeout time.Duration
	// PreAllocate > 0: Allocate serves blocks from a pool filled at most
	// that many at a time, sized to demand (pool.go; at most
	// MaxPreAllocate); 0: each Allocate asks.
	PreAllocate int
	// PoolScope, with PreAllocate, names the pool of an Allocate's ctx:
	// blocks pre-allocated in one scope are handed out only in it (a
	// refill is made with the ctx of the call that needs it, so as the
	// identity that ctx carries). Nil: one scope.
	PoolScope func(ctx context.Context) string
	// Now, when set, is the client's clock (the pool's ages and sizing;
	// tests). Default time.Now.
	Now func() time.Time
	// NoBatching sends each CommitKey, Allocate and GetKey as its own
	// request instead of batching concurrent ones (CommitsRoute,
	// AllocationsRoute, GetsRoute).
	NoBatching bool
	// TLS secures the requests (mutual TLS 1.3, https; nil: plaintext
	// http). Ignored with HTTPClient, which brings its own transport.
	TLS *tlsconf.Settings
	// AdminToken, when set, goes with every request as "Authorization:
	// Bearer TOKEN": the admin credential of a plaintext (--insecure) meta
	// service that has one (meta.Config.AdminToken). With TLS the admin
	// credential is an admin certificate.
	AdminToken string
}

// Client calls a meta service. It is safe for concurrent use.
//
// Errors: a non-2xx answer is an *Error (errors.Is(err, ErrNotFound), …
// work through its Unwrap); a meta service that cannot be reached is an
// *Error with code UNAVAILABLE whose message says "meta unreachable at
// ADDR"; a cancelled or expired ctx is returned as ctx.Err(), wrapped.
//
// Retries (up to Attempts, with a doubling backoff) apply to the
// idempotent calls — Heartbeat, ListBuckets, Allocate, CommitKey, GetKey,
// List, Nodes, Pipelines, Containers, Replication, ExitSafeMode — on
// UNAVAILABLE answers and on transport failures. Allocate counts as
// idempotent because a block allocated and never committed is garbage the
// meta service deletes; CommitKey because the meta service accepts a
// commit identical to the key's current version; ExitSafeMode because
// leaving safe mode twice is leaving it once. CreateBucket, DeleteBucket
// and DeleteKey are tried once — except that every call is tried again
// when the try certainly did nothing: the connection was refused, or a
// member of a replicated meta service answered that it is not the leader.
//
// A replicated meta service (several addresses): the client sends to the
// member it takes for the leader; a NotLeader answer naming the leader
// moves it there, any other UNAVAILABLE answer or transport failure to
// the next address, after a jittered pause (failoverMinBackoff doubling
// to failoverMaxBackoff), until FailoverTimeout or MaxFailoverAttempts.
// An answer lost in a failover leaves the outcome unknown; the retried
// call is idempotent as above (a retried Allocate may leak a block,
// which the meta service deletes after its allocation grace).
//
// Batching (batch.go): concurrent Allocate, CommitKey and GetKey calls
// share requests (AllocationsRoute, CommitsRoute, GetsRoute): a call
// joins a queue, and while fewer than MaxCommitBatchesInFlight batches of
// its kind are in flight a sender takes what is queued (at most
// MaxCommitBatch calls, MaxCommitBatchBytes of inline values). A lone call
// goes at once in a batch of one; under load the HTTP and JSON work of a
// request, and the meta service's lock and sync, are shared by up to 64
// calls. Each call gets its own answer or error; a batch is retried as a
// whole under the rules above (each of its calls is idempotent), and a
// call answered UNAVAILABLE inside a batch (its member stopped leading
// midway: outcome unknown) is tried again alone, following the leader. A
// call's ctx ends its wait, not its batch. ClientOptions.NoBatching
// sends each call alone.
type Client struct {
	bases    []string // scheme://host:port, no trailing slash
	hosts    []string
	cur      atomic.Int32 // index of the address taken for the leader
	hc       *http.Client
	tls      *tlsconf.Settings
	token    string // ClientOptions.AdminToken
	timeout  time.Duration
	attempts int
	backoff  time.Duration
	failover time.Duration
	// commits and allocs group concurrent CommitKeys and Allocates
	// (batch.go); off: noBatch.
	commits batcher[BatchedCommit, KeyInfo]
	allocs  batcher[AllocateRequest, AllocateResponse]
	gets    batcher[KeyName, KeyInfo]
	noBatch bool
	pool    *allocpool.Pool[AllocateResponse] // nil: no pre-allocation
}

// CheckAddrs says whether s is a meta address NewClient takes (host:port
// or http(s)://host:port, or a comma-separated list of them).
func CheckAddrs(s string) error {
	_, err := parseAddrs(s, "http")
	return err
}

// parseAddrs parses NewClient's baseURL, scheme for addresses without one.
func parseAddrs(baseURL, scheme string) ([]*url.URL, error) {
	var out []*url.URL
	for _, addr := range SplitAddrs(baseURL) {
		raw := addr
		if !strings.Contains(raw, "://") {
			raw = scheme + "://" + raw
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return nil, fmt.Errorf("meta address %q: want host:port or http://host:port", addr)
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("meta address %q: want host:port or http://host:port", baseURL)
	}
	return out, nil
}

// NewClient returns a client of the meta service at baseURL:
// "http://host:port" or just "host:port", or a comma-separated list of
// them (the members of a replicated meta service).
func NewClient(baseURL string, opts ClientOptions) (*Client, error) {
	c := &Client{hc: opts.HTTPClient, tls: opts.TLS, token: opts.AdminToken, timeout: opts.Timeout, attempts: opts.Attempts, backoff: opts.Backoff, failover: opts.FailoverTimeout, noBatch: opts.NoBatching}
	c.initBatchers()
	if opts.PreAllocate < 0 || opts.PreAllocate > MaxPreAllocate {
		return nil, fmt.Errorf("meta client: pre-allocate %d blocks: want 0..%d", opts.PreAllocate, MaxPreAllocate)
	}
	if opts.PreAllocate > 0 {
		c.pool = newPool(c, opts)
	}
	us, err := parseAddrs(baseURL, opts.TLS.Scheme())
	if err != nil {
		return nil, err
	}
	for i, u := range us {
		if opts.HTTPClient == nil && u.Scheme != opts.TLS.Scheme() {
			return nil, fmt.Errorf("meta address %q: the client is %s (%s), not %s", SplitAddrs(baseURL)[i], opts.TLS.Mode(), opts.TLS.Scheme(), u.Scheme)
		}
		c.bases, c.hosts = append(c.bases, u.Scheme+"://"+u.Host), append(c.hosts, u.Host)
	}
	if c.failover <= 0 {
		c.failover = DefaultFailoverTimeout
	}
	if c.hc == nil {
		// Not httpdirect.ForMeta (the gateway's): the datanodes' heartbeats
		// and the key clients gain nothing measurable from it (ARCHITECTURE §17.1).
		c.hc = &http.Client{Transport: opts.TLS.Pin(tlsconf.RoleMeta).HTTPTransport(&http.Transport{ // the meta service only (issue 33)
			Proxy:               nil, // the meta service is on the cluster's network, never behind a proxy
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     90 * time.Second,
		})}
	}
	if c.timeout <= 0 {
		c.timeout = DefaultClientTimeout
	}
	if c.attempts <= 0 {
		c.attempts = DefaultClientAttempts
	}
	if c.backoff <= 0 {
		c.backoff = DefaultClientBackoff
	}
	return c, nil
}

// TLS is the client's TLS settings (nil: plaintext): the key client dials
// the datanodes with the same identity.
func (c *Client) TLS() *tlsconf.Settings { return c.tls }

// Addr is the host:port of the meta member the client takes for the
// leader.
func (c *Client) Addr() string { return c.hosts[c.cur.Load()] }

// KeyPath is the escaped URL path of a key: /v1/keys/{bucket}/{key...},
// each '/'-separated segment of the key path-escaped.
func KeyPath(bucket, key string) string {
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return "/v1/keys/" + url.PathEscape(bucket) + "/" + strings.Join(segs, "/")
}

// Heartbeat sends a heartbeat (a registration when hb.NodeID is 0).
func (c *Client) Heartbeat(ctx context.Context, hb *Heartbeat) (*HeartbeatResponse, error) {
	var r HeartbeatResponse
	return &r, c.Do(ctx, http.MethodPost, "/v1/heartbeat", hb, &r, true)
}

// CreateBucket creates a bucket (ErrExists if it exists).
func (c *Client) CreateBucket(ctx context.Context, name string) (Bucket, error) {
	var b Bucket
	if err := ValidBucket(name); err != nil {
		return b, err
	}
	return b, c.Do(ctx, http.MethodPut, "/v1/buckets/"+url.PathEscape(name), nil, &b, false)
}

// ListBuckets lists the buckets.
func (c *Client) ListBuckets(ctx context.Context) (BucketList, error) {
	var l BucketList
	return l, c.Do(ctx, http.MethodGet, "/v1/buckets", nil, &l, true)
}

// DeleteBucket deletes an empty bucket (ErrNotEmpty otherwise).
func (c *Client) DeleteBucket(ctx context.Context, name string) error {
	if err := ValidBucket(name); err != nil {
		return err
	}
	return c.Do(ctx, http.MethodDelete, "/v1/buckets/"+url.PathEscape(name), nil, nil, false)
}

// Allocate asks for a new block for bucket/key (ErrNoPipeline when no
// healthy pipeline is left after req.ExcludePipelines).
func (c *Client) Allocate(ctx context.Context, req AllocateRequest) (AllocateResponse, error) {
	var r AllocateResponse
	if req.AnyKey {
		if err := ValidBucket(req.Bucket); err != nil {
			return r, err
		}
	} else if err := validNames(req.Bucket, req.Key); err != nil {
		return r, err
	}
	if c.pool != nil && len(req.ExcludePipelines) == 0 {
		if r, pooled, err := c.pool.Take(ctx, req.Bucket); pooled || err != nil {
			return r, err
		}
	}
	return c.allocateUnpooled(ctx, req)
}

// CommitKey makes bucket/key visible with the given blocks, atomically.
func (c *Client) CommitKey(ctx context.Context, bucket, key string, ck CommitKey) (KeyInfo, error) {
	var ki KeyInfo
	if err := validNames(bucket, key); err != nil {
		return ki, err
	}
	if ck.CommitID == "" {
		// Every try of this call carries the same ID: a retry after an
		// unknown outcome is answered with what the first try did.
		ck.CommitID = NewCommitID()
	}
	if !c.noBatch {
		return c.commits.call(ctx, BatchedCommit{Bucket: bucket, Key: key, CommitKey: ck})
	}
	return c.commitAlone(ctx, bucket, key, ck)
}

// commitAlone sends one CommitKey as its own request.
func (c *Client) commitAlone(ctx context.Context, bucket, key string, ck CommitKey) (KeyInfo, error) {
	var ki KeyInfo
	if len(ck.Inline) > 0 { // the value raw after the JSON (InlineContentType)
		value := ck.Inline
		ck.Inline = nil
		body, err := EncodeInline(ck, value)
		if err != nil {
			return ki, fmt.Errorf("meta commit %s/%s: encode request: %w", bucket, key, err)
		}
		return ki, c.Do(ctx, http.MethodPost, KeyPath(bucket, key), rawBody{body, InlineContentType}, &ki, true)
	}
	return ki, c.Do(ctx, http.MethodPost, KeyPath(bucket, key), ck, &ki, true)
}

// rawBody is a request body already encoded, with its content type.
type rawBody struct {
	b           []byte
	contentType string
}

// NewCommitID is a random commit ID (CommitKey.CommitID): 16 bytes, hex.
func NewCommitID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return hex.EncodeToString(b[:])
}

// GetKey returns a committed key with its blocks and their replicas.
func (c *Client) GetKey(ctx context.Context, bucket, key string) (KeyInfo, error) {
	var ki KeyInfo
	if err := validNames(bucket, key); err != nil {
		return ki, err
	}
	if !c.noBatch {
		return c.gets.call(ctx, KeyName{Bucket: bucket, Key: key})
	}
	return ki, c.Do(ctx, http.MethodGet, KeyPath(bucket, key), nil, &ki, true)
}

// allocateAlone sends one Allocate as its own request.
func (c *Client) allocateAlone(ctx context.Context, req AllocateRequest) (AllocateResponse, error) {
	var r AllocateResponse
	return r, c.Do(ctx, http.MethodPost, "/v1/allocate", req, &r, true)
}

// DeleteKey deletes a key; its blocks are deleted on the datanodes later.
func (c *Client) DeleteKey(ctx context.Context, bucket, key string) error {
	if err := validNames(bucket, key); err != nil {
		return err
	}
	return c.Do(ctx, http.MethodDelete, KeyPath(bucket, key), nil, nil, false)
}

// ListOptions select one page of List.
type ListOptions struct {
	Prefix     string
	StartAfter string // KeyList.Next of the previous page
	Limit      int    // 0: the server's MaxListLimit
	// Delimiter, when set, rolls the keys that hold it after Prefix up
	// into KeyList.CommonPrefixes.
	Delimiter string
}

// List returns one page of the keys of bucket (without their blocks).
func (c *Client) List(ctx context.Context, bucket string, o ListOptions) (KeyList, error) {
	var l KeyList
	if err := ValidBucket(bucket); err != nil {
		return l, err
	}
	q := url.Values{}
	if o.Prefix != "" {
		q.Set("prefix", o.Prefix)
	}
	if o.StartAfter != "" {
		q.Set("start_after", o.StartAfter)
	}
	if o.Limit != 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Delimiter != "" {
		q.Set("delimiter", o.Delimiter)
	}
	path := "/v1/list/" + url.PathEscape(bucket)
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return l, c.Do(ctx, http.MethodGet, path, nil, &l, true)
}

// ListKeys is List with its options as arguments (keyclient.Meta).
func (c *Client) ListKeys(ctx context.Context, bucket, prefix, startAfter string, limit int) (KeyList, error) {
	return c.List(ctx, bucket, ListOptions{Prefix: prefix, StartAfter: startAfter, Limit: limit})
}

// Nodes is the admin view of the datanodes.
func (c *Client) Nodes(ctx context.Context) ([]NodeInfo, error) {
	var l NodeList
	err := c.Do(ctx, http.MethodGet, "/v1/nodes", nil, &l, true)
	return l.Nodes, err
}

// Pipelines is the admin view of the pipelines.
func (c *Client) Pipelines(ctx context.Context) ([]Pipeline, error) {
	var l PipelineList
	err := c.Do(ctx, http.MethodGet, "/v1/pipelines", nil, &l, true)
	return l.Pipelines, err
}

// Containers is the admin view of the containers.
func (c *Client) Containers(ctx context.Context) ([]ContainerInfo, error) {
	var l ContainerList
	err := c.Do(ctx, http.MethodGet, "/v1/containers", nil, &l, true)
	return l.Containers, err
}

// Replication is the replication manager's state.
func (c *Client) Replication(ctx context.Context) (*ReplicationStatus, error) {
	var st ReplicationStatus
	if err := c.Do(ctx, http.MethodGet, "/v1/replication", nil, &st, true); err != nil {
		return nil, err
	}
	return &st, nil
}

// ExitSafeMode makes the meta service leave safe mode now (replication
// decisions start at its next tick) and returns the replication state.
// Exiting when already out of safe mode changes nothing.
func (c *Client) ExitSafeMode(ctx context.Context) (*ReplicationStatus, error) {
	var st ReplicationStatus
	if err := c.Do(ctx, http.MethodPost, "/v1/safemode/exit", nil, &st, true); err != nil {
		return nil, err
	}
	return &st, nil
}

func validNames(bucket, key string) error {
	if err := ValidBucket(bucket); err != nil {
		return err
	}
	return ValidKey(key)
}

// Backup opens a consistent backup of the meta store: a tar stream of
// "pebble/NAME" files (see meta's backup.go; meta.UnpackBackup unpacks it
// into a directory the meta service opens), which the caller reads to the
// end and closes. It is tried once and bounded by ctx only, not by the
// per-attempt timeout: a large store takes as long as it takes. A stream
// cut short fails in the unpacking (a truncated tar stream).
func (c *Client) Backup(ctx context.Context) (io.ReadCloser, error) {
	const path = "/v1/admin/backup"
	// The member taken for the leader (a follower's store is as
	// consistent, perhaps behind).
	i := int(c.cur.Load())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.bases[i]+path, nil)
	if err != nil {
		return nil, &Error{Code: CodeInvalid, Message: fmt.Sprintf("meta GET %s: %v", path, err)}
	}
	c.authorize(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("meta GET %s: %w", path, ctx.Err())
		}
		return nil, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("meta unreachable at %s: GET %s: %v", c.hosts[i], path, unwrapURLError(err))}
	}
	if resp.StatusCode != http.StatusOK {
		defer func() { _ = resp.Body.Close() }() // read (errorOf): nothing to report of it
		return nil, c.errorOf(i, http.MethodGet, path, resp)
	}
	return resp.Body, nil
}

// Do runs one call (JSON in and out; exported for API families kept in packages of their own): up to c.attempts
// tries, a non-idempotent call again only after a try that certainly did
// nothing; across the members of a replicated meta service, until c.failover.
func (c *Client) Do(ctx context.Context, method, path string, in, out any, idempotent bool) error {
	var body []byte
	contentType := "application/json"
	if rb, ok := in.(rawBody); ok {
		body, contentType = rb.b, rb.contentType
	} else if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("meta %s %s: encode request: %w", method, path, err)
		}
	}
	multi := len(c.bases) > 1
	// A non-idempotent call is tried again only after a try that did
	// nothing (the break below), within the same bound.
	attempts := c.attempts
	if multi {
		attempts = MaxFailoverAttempts
	}
	deadline := time.Now().Add(c.failover)
	delay := c.backoff
	if multi {
		delay = failoverMinBackoff
	}
	var err error
	for attempt := 1; ; attempt++ {
		i := int(c.cur.Load())
		err = c.once(ctx, i, method, path, body, contentType, out)
		if err == nil || ctx.Err() != nil || !retryable(err) || (!idempotent && !didNothing(err)) {
			break
		}
		if attempt >= attempts || (multi && time.Now().After(deadline)) {
			break
		}
		pause := delay
		if multi {
			if c.follow(i, err) {
				pause = 0 // straight to the leader named
			} else {
				pause = backoff.Jitter(delay)
			}
		}
		if pause > 0 {
			if !backoff.Sleep(ctx, pause) {
				return fmt.Errorf("meta %s %s: %w (after: %v)", method, path, ctx.Err(), err)
			}
			if multi {
				delay = min(2*delay, failoverMaxBackoff)
			} else {
				delay = min(2*delay, MaxClientBackoff)
			}
		}
	}
	return err
}

// follow moves the client after a failed try on address i: to the leader
// the answer names (true), else to the next address (false).
func (c *Client) follow(i int, err error) bool {
	var e *Error
	if errors.As(err, &e) && e.Leader != "" {
		for j, h := range c.hosts {
			if h == e.Leader && j != i {
				c.cur.CompareAndSwap(int32(i), int32(j))
				return true
			}
		}
	}
	c.cur.CompareAndSwap(int32(i), int32((i+1)%len(c.bases)))
	return false
}

// didNothing: the try certainly changed nothing (never sent, or refused
// by a member that is not the leader), so any call may be tried again.
func didNothing(err error) bool {
	var e *Error
	return errors.As(err, &e) && (e.NotLeader || e.notSent || e.Code == CodeBusy)
}

// retryable: the meta service was unreachable or said UNAVAILABLE.
func retryable(err error) bool {
	var e *Error
	return errors.As(err, &e) && (e.Code == CodeUnavailable || e.Code == CodeBusy)
}

// once runs one HTTP exchange with the member at address i. A *KeyInfo
// answer may come as InlineContentType (asked for by Accept).
func (c *Client) once(ctx context.Context, i int, method, path string, body []byte, contentType string, out any) error {
	actx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(actx, method, c.bases[i]+path, rd)
	if err != nil {
		return &Error{Code: CodeInvalid, Message: fmt.Sprintf("meta %s %s: %v", method, path, err)}
	}
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	c.authorize(req)
	ki, wantsInline := out.(*KeyInfo)
	gets, isGets := out.(*[]GetResult)
	if wantsInline {
		req.Header.Set("Accept", InlineContentType+", application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("meta %s %s: %w", method, path, ctx.Err())
		}
		var op *net.OpError
		notSent := errors.As(err, &op) && op.Op == "dial"
		return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("meta unreachable at %s: %s %s: %v", c.hosts[i], method, path, unwrapURLError(err)), notSent: notSent}
	}
	defer func() { _ = resp.Body.Close() }() // read below: its reads' errors are the ones
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return c.errorOf(i, method, path, resp)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		// Drained for the connection's reuse; nothing of it is used.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBodyBytes))
		return nil
	}
	if (wantsInline || isGets) && resp.Header.Get("Content-Type") == InlineContentType {
		b, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes))
		if err == nil && wantsInline {
			ki.Inline, err = DecodeInline(b, ki)
		} else if err == nil {
			*gets, err = DecodeGetBatchResult(b)
		}
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("meta %s %s: %w", method, path, ctx.Err())
			}
			return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("meta at %s: %s %s: reading the answer: %v", c.hosts[i], method, path, err)}
		}
		return nil
	}
	dec := json.NewDecoder(io.LimitReader(resp.Body, MaxResponseBytes))
	if err := dec.Decode(out); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("meta %s %s: %w", method, path, ctx.Err())
		}
		return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("meta at %s: %s %s: reading the answer: %v", c.hosts[i], method, path, err)}
	}
	return nil
}

// errorOf turns a non-2xx response into an *Error.
func (c *Client) errorOf(i int, method, path string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBodyBytes))
	var e Error
	if json.Unmarshal(b, &e) == nil && e.Code != "" {
		return &e
	}
	code := CodeInternal
	switch {
	case resp.StatusCode == http.StatusBadRequest:
		code = CodeInvalid
	case resp.StatusCode == http.StatusNotFound:
		code = CodeNotFound
	case resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusGatewayTimeout:
		code = CodeUnavailable
	}
	snippet := strings.TrimSpace(string(b))
	if len(snippet) > 200 {
		snippet = snippet[:200] + "…"
	}
	return &Error{Code: code, Message: fmt.Sprintf("meta at %s: %s %s: HTTP %d: %s", c.hosts[i], method, path, resp.StatusCode, snippet)}
}

// authorize adds the admin token (ClientOptions.AdminToken), if any.
func (c *Client) authorize(req *http.Request) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
}

// unwrapURLError drops the *url.Error wrapper (it repeats method and URL).
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
