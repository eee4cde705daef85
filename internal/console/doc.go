// Package console is Spindle's web console (issue 38): server-rendered HTML
// pages at /ui/ on an HTTPS listener of its own, showing the cluster as the
// meta service sees it (the same calls as `spindle admin nodes, pipelines,
// containers, replication --json`), the buckets and keys a signed-in user
// may see, live charts of the servers' own metrics and the benchmark
// reports of a directory.
//
// `spindle server` starts it (internal/server: console.go) with the S3
// root user as its admin credential; `spindle meta --console-listen` with
// WithMeta, beside the meta service, identified by a certificate of role
// s3. Both print or log its URL.
//
// # How it is built
//
// Go html/template pages and one stylesheet and one small script, all
// embedded (go:embed assets): no CDN, no front-end build. Every read-only
// page is complete without JavaScript (charts are SVG drawn by the
// server); the script only refreshes a page's <main> in place and the
// charts' images. Content-Security-Policy allows nothing but this origin's
// own files: no inline script, no inline style.
//
// # Sign-in and authorization
//
// The listener asks no client certificate (the meta API's mutual TLS is
// unchanged; the console is one of its clients). A user signs in with an
// S3 access key and secret: the console's admin credential (Config.Admin,
// the server's S3 root user: every right) or any S3 user of the meta
// service, whose secret is looked up by its access key (the S3 gateway's
// look-up) and compared in constant time. Sessions are random 256-bit
// IDs kept in memory (lost at a restart), in a cookie that is Secure,
// HttpOnly and SameSite=Strict, ending after Config.SessionTTL. Every
// change (upload, delete, sign-out) is a POST carrying the session's CSRF
// token (a second random value, compared in constant time) and coming
// from this origin (Origin or Sec-Fetch-Site, when the browser sends
// them): anything else is refused with 403 before it is looked at.
//
// What a user may do is the meta service's decision, not the console's:
// bucket and key calls go through Store, whose meta client names the
// signed-in user on every call (metaapi/authz.UserContext), so that the
// meta service applies that user's grants, bucket ownership and S3
// permissions exactly as for the S3 API. A user without rights sees the
// refusal (403), whatever the page offered. The cluster pages are
// read-only views (the meta service's views are open to every role).
//
// # Metrics
//
// A Sampler reads the meta service's and the datanodes' /metrics every
// Config.SampleEvery into a ring of an hour of samples (rates and mean
// latencies computed from counter deltas); the charts draw from it.
//
// Concurrency: a Console serves requests concurrently; sessions are under
// a mutex; the sampler is one goroutine, its ring under its own mutex.
// Close stops the listener and the sampler.
package console
