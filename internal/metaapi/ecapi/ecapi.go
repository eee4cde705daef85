// Package ecapi is the meta service's protocol for erasure coding (issue
// 37): the cluster's default policy and a bucket's, the conversion work
// of a datanode and its report, and an EC container's layout for readers;
// with its client calls as free functions over metaapi.Client's Do.
// Routes (JSON bodies, errors as in metaapi):
//
//	GET  /v1/ec/default              → Policy (the cluster default; "rep3" when none is set)
//	PUT  /v1/ec/default              Policy (204)
//	GET  /v1/ec/buckets/{bucket}     → Policy (the bucket's own, its tag's or the default: Source says which)
//	PUT  /v1/ec/buckets/{bucket}     Policy (204; "" removes the bucket's own)
//	POST /v1/ec/work                 WorkRequest → Work (a datanode: what to convert, which replicas to drop)
//	POST /v1/ec/converted            Converted (204: the container is EC from now on)
//	GET  /v1/ec/containers/{id}      → Layout (404 NOT_FOUND: not erasure-coded)
//
// Invariants: a policy is ec.ParseSpec's text (its canonical String on
// the way out); a PUT of a coded policy is refused (INVALID) when fewer
// datanodes are registered than its shards, never taken and left
// unconvertible. A Converted report names a datanode for every shard, each
// shard already fsynced there; once the meta service answered it the
// container is erasure-coded, and only then does a Work answer list its
// replicas to drop. Over TLS a datanode's work and reports are refused
// (FORBIDDEN) unless its certificate is the one its node record is bound
// to, as for heartbeats.
//
// Concurrency: the functions are safe for concurrent use when their Doer
// is (metaapi.Client is).
package ecapi

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
)

// Routes.
const (
	DefaultRoute   = "/v1/ec/default"
	BucketsRoute   = "/v1/ec/buckets/"
	WorkRoute      = "/v1/ec/work"
	ConvertedRoute = "/v1/ec/converted"
	ContainerRoute = "/v1/ec/containers/"
)

// TagName is the S3 bucket tag that names a bucket's policy (when it has
// none of its own).
const TagName = "spindle-ec"

// Policy is a policy's text (ec.ParseSpec), and on reads where it comes
// from: "bucket", "tag", "default" or "" (the built-in rep3).
type Policy struct {
	Policy string `json:"policy"`
	Source string `json:"source,omitempty"`
}

// WorkRequest is a datanode asking for its erasure-coding work.
type WorkRequest struct {
	Node uint64 `json:"node"`
	// Converting lists the conversions it runs now.
	Converting []uint64 `json:"converting,omitempty"`
}

// Work is a datanode's erasure-coding work.
type Work struct {
	Convert []Conversion `json:"convert,omitempty"`
	// Drop lists containers erasure-coded for good whose replica this
	// datanode still holds: it deletes them.
	Drop []uint64 `json:"drop,omitempty"`
}

// Conversion: encode this node's CLOSED replica of Container with Policy
// and store shard i on Targets[i].
type Conversion struct {
	Container uint64   `json:"container"`
	Policy    string   `json:"policy"`
	Targets   []Shard  `json:"targets"`
	Buckets   []string `json:"buckets,omitempty"`
}

// Shard is where a shard is: a datanode and its data-path address (bulk).
type Shard struct {
	Node uint64 `json:"node"`
	Addr string `json:"addr"`
}

// Block is where a block's bytes are in an EC container's logical bytes.
type Block struct {
	Local  uint64 `json:"local"`
	Offset uint64 `json:"offset"`
	Length uint64 `json:"length"`
	CRC32C uint32 `json:"crc32c"`
}

// Converted reports a finished conversion: every shard fsynced on its node.
type Converted struct {
	// Node is the converter (over TLS, the caller's certificate must be
	// bound to it).
	Node      uint64   `json:"node"`
	Container uint64   `json:"container"`
	Policy    string   `json:"policy"`
	Logical   uint64   `json:"logical"`
	Nodes     []uint64 `json:"nodes"`
	Blocks    []Block  `json:"blocks"`
}

// Layout is an EC container as readers see it.
type Layout struct {
	Container uint64  `json:"container"`
	Policy    string  `json:"policy"`
	Logical   uint64  `json:"logical"`
	Shards    []Shard `json:"shards"`
	Blocks    []Block `json:"blocks"`
}

// Doer runs one meta service call (metaapi.Client.Do).
type Doer interface {
	Do(ctx context.Context, method, path string, in, out any, idempotent bool) error
}

// GetDefault returns the cluster's default policy.
func GetDefault(ctx context.Context, c Doer) (Policy, error) {
	var p Policy
	err := c.Do(ctx, http.MethodGet, DefaultRoute, nil, &p, true)
	return p, err
}

// SetDefault sets the cluster's default policy.
func SetDefault(ctx context.Context, c Doer, policy string) error {
	return c.Do(ctx, http.MethodPut, DefaultRoute, Policy{Policy: policy}, nil, true)
}

// GetBucket returns the policy a bucket's containers get.
func GetBucket(ctx context.Context, c Doer, bucket string) (Policy, error) {
	var p Policy
	err := c.Do(ctx, http.MethodGet, BucketsRoute+url.PathEscape(bucket), nil, &p, true)
	return p, err
}

// SetBucket sets a bucket's own policy ("" removes it).
func SetBucket(ctx context.Context, c Doer, bucket, policy string) error {
	return c.Do(ctx, http.MethodPut, BucketsRoute+url.PathEscape(bucket), Policy{Policy: policy}, nil, true)
}

// GetWork asks for a datanode's erasure-coding work.
func GetWork(ctx context.Context, c Doer, req WorkRequest) (Work, error) {
	var w Work
	err := c.Do(ctx, http.MethodPost, WorkRoute, req, &w, true)
	return w, err
}

// ReportConverted reports a finished conversion (idempotent: a report of
// a container already erasure-coded with the same layout is no error).
func ReportConverted(ctx context.Context, c Doer, r Converted) error {
	return c.Do(ctx, http.MethodPost, ConvertedRoute, r, nil, true)
}

// GetLayout returns an EC container's layout.
func GetLayout(ctx context.Context, c Doer, container uint64) (Layout, error) {
	var l Layout
	err := c.Do(ctx, http.MethodGet, ContainerRoute+strconv.FormatUint(container, 10), nil, &l, true)
	return l, err
}
