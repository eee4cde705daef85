package console

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/spindle-store/spindle/internal/units"
)

//go:embed assets
var assets embed.FS

// templates are the pages, each the layout with its own "content".
type templates struct {
	pages map[string]*template.Template
}

var funcs = template.FuncMap{
	"bytes": func(v any) string {
		switch n := v.(type) {
		case uint64:
			return units.FormatBytes(int64(n))
		case int64:
			return units.FormatBytes(n)
		case int:
			return units.FormatBytes(int64(n))
		case float64:
			return units.FormatBytes(int64(n))
		}
		return fmt.Sprint(v)
	},
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		d := time.Since(t).Round(100 * time.Millisecond)
		return d.String() + " ago"
	},
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"join": func(v []uint64) string {
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = fmt.Sprint(x)
		}
		return strings.Join(s, ", ")
	},
	"lower": strings.ToLower,
	"pct": func(used, total uint64) string {
		if total == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(used)/float64(total))
	},
	"sub":     func(a, b uint64) uint64 { return a - min(a, b) },
	"num":     fmtNum,
	"objpath": func(bucket, key string) template.URL { return template.URL(objectPath("object", bucket, key)) }, // escaped by objectPath
	"html":    func(s string) template.HTML { return template.HTML(s) },                                         // only for the server's own SVG
}

func parseTemplates() (*templates, error) {
	layout, err := fs.ReadFile(assets, "assets/layout.html")
	if err != nil {
		return nil, err
	}
	names, err := fs.Glob(assets, "assets/page_*.html")
	if err != nil {
		return nil, err
	}
	t := &templates{pages: map[string]*template.Template{}}
	for _, n := range names {
		body, err := fs.ReadFile(assets, n)
		if err != nil {
			return nil, err
		}
		name := strings.TrimSuffix(strings.TrimPrefix(n, "assets/page_"), ".html")
		p, err := template.New("layout").Funcs(funcs).Parse(string(layout))
		if err == nil {
			_, err = p.Parse(string(body))
		}
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", n, err)
		}
		t.pages[name] = p
	}
	return t, nil
}

// view is what every page gets.
type view struct {
	Page, Title string
	User        string
	Admin       bool
	CSRF        string
	// Refresh: the script refreshes the page's main every this many
	// seconds (0: never).
	Refresh int
	Data    map[string]any
	Error   string
	Now     time.Time
}

var titles = map[string]string{
	"login": "Sign in", "overview": "Overview", "datanodes": "Datanodes", "pipelines": "Pipelines",
	"containers": "Containers", "replication": "Re-replication", "buckets": "Buckets", "keys": "Keys",
	"object": "Key", "charts": "Live charts", "reports": "Benchmark reports", "report": "Report", "error": "Error",
}

// securityHeaders: only this origin's own files, no framing, no sniffing.
// No Strict-Transport-Security: on "localhost" it would hold every port of
// the operator's machine to HTTPS for its lifetime.
func securityHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// same-origin, not no-referrer: with no-referrer browsers send
	// "Origin: null" on the console's own form posts.
	h.Set("Referrer-Policy", "same-origin")
}

// render writes page name with data (ss nil: signed out).
func (c *Console) render(w http.ResponseWriter, r *http.Request, ss *session, name string, status int, data map[string]any) {
	v := view{Page: name, Title: titles[name], Data: data, Now: c.cfg.Now()}
	if ss != nil {
		v.User, v.Admin, v.CSRF = ss.name, ss.admin, ss.csrf
	}
	if e, ok := data["Error"].(string); ok {
		v.Error = e
	}
	if n, ok := data["Refresh"].(int); ok {
		v.Refresh = n
	}
	var buf bytes.Buffer
	if err := c.tmpl.pages[name].Execute(&buf, v); err != nil {
		c.cfg.Logger.Warn("console: rendering", "page", name, "err", err)
		http.Error(w, "rendering the page failed", http.StatusInternalServerError)
		return
	}
	securityHeaders(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes()) // the client went away: nothing to do
}
