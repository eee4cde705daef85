package console

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// pageSize is the keys a listing page shows.
const pageSize = 200

func (c *Console) pageBuckets(w http.ResponseWriter, r *http.Request, ss *session) {
	bs, err := c.cfg.Store.Buckets(r.Context(), ss.user)
	if err != nil {
		c.errorPage(w, r, ss, err)
		return
	}
	c.render(w, r, ss, "buckets", http.StatusOK, map[string]any{"Buckets": bs})
}

// crumb is one link of a prefix's breadcrumb.
type crumb struct{ Name, Prefix string }

func crumbs(prefix string) []crumb {
	var out []crumb
	acc := ""
	for _, part := range strings.SplitAfter(prefix, "/") {
		if part == "" {
			continue
		}
		acc += part
		out = append(out, crumb{part, acc})
	}
	return out
}

func (c *Console) pageKeys(w http.ResponseWriter, r *http.Request, ss *session) {
	bucket := r.PathValue("bucket")
	q := r.URL.Query()
	prefix := q.Get("prefix")
	l, err := c.cfg.Store.List(r.Context(), ss.user, bucket, metaapi.ListOptions{Prefix: prefix, StartAfter: q.Get("after"), Limit: pageSize, Delimiter: "/"})
	if err != nil {
		c.errorPage(w, r, ss, err)
		return
	}
	c.render(w, r, ss, "keys", http.StatusOK, map[string]any{"Bucket": bucket, "Prefix": prefix, "List": l, "Crumbs": crumbs(prefix),
		"Notice": q.Get("notice")})
}

// objectPath is /ui/object/BUCKET/KEY, escaped.
func objectPath(kind, bucket, key string) string {
	return "/ui/" + kind + "/" + url.PathEscape(bucket) + "/" + escapeKey(key)
}

// escapeKey escapes each '/'-separated part of key.
func escapeKey(key string) string {
	parts := strings.Split(key, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

func (c *Console) pageObject(w http.ResponseWriter, r *http.Request, ss *session) {
	bucket, key := r.PathValue("bucket"), r.PathValue("key")
	ki, err := c.cfg.Store.Stat(r.Context(), ss.user, bucket, key)
	if err != nil {
		c.errorPage(w, r, ss, err)
		return
	}
	dir := ""
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		dir = key[:i+1]
	}
	c.render(w, r, ss, "object", http.StatusOK, map[string]any{"K": ki, "Dir": dir, "CRC": fmt.Sprintf("%08x", ki.CRC32C),
		"Download": objectPath("download", bucket, key), "Delete": objectPath("delete", bucket, key), "Blocks": len(ki.Blocks)})
}

// countingWriter counts what passed (whether the download started).
type countingWriter struct {
	w http.ResponseWriter
	n int64
}

func (cw *countingWriter) Write(p []byte) (int, error) {
	n, err := cw.w.Write(p)
	cw.n += int64(n)
	return n, err
}

func (c *Console) download(w http.ResponseWriter, r *http.Request, ss *session) {
	bucket, key := r.PathValue("bucket"), r.PathValue("key")
	ki, err := c.cfg.Store.Stat(r.Context(), ss.user, bucket, key)
	if err != nil {
		c.errorPage(w, r, ss, err)
		return
	}
	name := key[strings.LastIndexByte(key, '/')+1:]
	securityHeaders(w)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	w.Header().Set("Content-Length", strconv.FormatUint(ki.Size, 10))
	w.Header().Set("Cache-Control", "no-store")
	cw := &countingWriter{w: w}
	if err := c.cfg.Store.Get(r.Context(), ss.user, bucket, key, cw); err != nil {
		if cw.n == 0 {
			w.Header().Del("Content-Disposition")
			w.Header().Del("Content-Length")
			c.errorPage(w, r, ss, err)
			return
		}
		// Mid-body: the connection is cut short (Content-Length unmet).
		c.cfg.Logger.Warn("console: download failed midway", "bucket", bucket, "key", key, "bytes", cw.n, "err", err)
		panic(http.ErrAbortHandler)
	}
}

// upload stores the multipart form's file under the prefix given: the
// form's fields in order csrf, prefix, (name,) file — the token is read
// and checked before any byte of the file.
func (c *Console) upload(w http.ResponseWriter, r *http.Request, ss *session) {
	bucket := r.PathValue("bucket")
	r.Body = http.MaxBytesReader(w, r.Body, MaxUploadBytes+1<<20)
	mr, err := r.MultipartReader()
	if err != nil {
		http.Error(w, "want a multipart form: "+err.Error(), http.StatusBadRequest)
		return
	}
	fields := map[string]string{}
	for {
		p, err := mr.NextPart()
		if err != nil {
			http.Error(w, "the form has no file", http.StatusBadRequest)
			return
		}
		if p.FormName() != "file" {
			b, err := io.ReadAll(io.LimitReader(p, 4096))
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			fields[p.FormName()] = string(b)
			continue
		}
		if !checkCSRF(r, ss, fields["csrf"]) {
			http.Error(w, "refused: missing or wrong CSRF token, or another origin", http.StatusForbidden)
			return
		}
		name := fields["name"]
		if name == "" {
			name = p.FileName()
		}
		if name == "" {
			http.Error(w, "no key name: give one or pick a file", http.StatusBadRequest)
			return
		}
		key := fields["prefix"] + name
		ki, err := c.cfg.Store.Put(r.Context(), ss.user, bucket, key, p, -1)
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				http.Error(w, fmt.Sprintf("upload larger than %d bytes", int64(MaxUploadBytes)), http.StatusRequestEntityTooLarge)
				return
			}
			c.errorPage(w, r, ss, err)
			return
		}
		c.cfg.Logger.Info("console upload", "user", ss.name, "bucket", bucket, "key", key, "bytes", ki.Size)
		notice := fmt.Sprintf("uploaded %s (%d bytes)", key, ki.Size)
		http.Redirect(w, r, "/ui/buckets/"+url.PathEscape(bucket)+"?prefix="+url.QueryEscape(fields["prefix"])+"&notice="+url.QueryEscape(notice), http.StatusSeeOther)
		return
	}
}

func (c *Console) deleteKey(w http.ResponseWriter, r *http.Request, ss *session) {
	bucket, key := r.PathValue("bucket"), r.PathValue("key")
	if err := c.cfg.Store.Delete(r.Context(), ss.user, bucket, key); err != nil {
		c.errorPage(w, r, ss, err)
		return
	}
	c.cfg.Logger.Info("console delete", "user", ss.name, "bucket", bucket, "key", key)
	dir := ""
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		dir = key[:i+1]
	}
	http.Redirect(w, r, "/ui/buckets/"+url.PathEscape(bucket)+"?prefix="+url.QueryEscape(dir)+"&notice="+url.QueryEscape("deleted "+key), http.StatusSeeOther)
}
