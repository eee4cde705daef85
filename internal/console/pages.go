package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// viewTimeout bounds a page's meta calls.
const viewTimeout = 10 * time.Second

// refreshSeconds is how often the script refreshes a live page.
const refreshSeconds = 5

// Handler is the console's routes.
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	static, err := fs.Sub(assets, "assets/static")
	if err != nil {
		panic(err) // embedded at build time
	}
	fileServer := http.StripPrefix("/ui/static/", http.FileServerFS(static))
	mux.HandleFunc("GET /ui/static/", func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w)
		w.Header().Set("Cache-Control", "public, max-age=3600")
		fileServer.ServeHTTP(w, r)
	})
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) {
		b, err := fs.ReadFile(static, "favicon.svg")
		if err != nil {
			http.NotFound(w, r)
			return
		}
		securityHeaders(w)
		w.Header().Set("Content-Type", "image/svg+xml")
		w.Header().Set("Cache-Control", "public, max-age=86400")
		_, _ = w.Write(b) // the client went away: nothing to do
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ui/", http.StatusFound) })
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ui/", http.StatusFound) })
	mux.HandleFunc("GET /ui/login", c.handleLogin)
	mux.HandleFunc("POST /ui/login", c.handleLogin)
	mux.Handle("POST /ui/logout", c.authed(true, c.handleLogout))
	mux.Handle("GET /ui/{$}", c.authed(false, c.pageOverview))
	mux.Handle("GET /ui/datanodes", c.authed(false, c.pageDatanodes))
	mux.Handle("GET /ui/pipelines", c.authed(false, c.pagePipelines))
	mux.Handle("GET /ui/containers", c.authed(false, c.pageContainers))
	mux.Handle("GET /ui/replication", c.authed(false, c.pageReplication))
	mux.Handle("GET /ui/buckets", c.authed(false, c.pageBuckets))
	mux.Handle("GET /ui/buckets/{bucket}", c.authed(false, c.pageKeys))
	mux.Handle("GET /ui/object/{bucket}/{key...}", c.authed(false, c.pageObject))
	mux.Handle("GET /ui/download/{bucket}/{key...}", c.authed(false, c.download))
	mux.Handle("POST /ui/upload/{bucket}", c.authed(false, c.upload)) // its CSRF token is in the multipart body: upload checks it
	mux.Handle("POST /ui/delete/{bucket}/{key...}", c.authed(true, c.deleteKey))
	mux.Handle("GET /ui/charts", c.authed(false, c.pageCharts))
	mux.Handle("GET /ui/charts/{id}", c.authed(false, c.chartSVG))
	mux.Handle("GET /ui/reports", c.authed(false, c.pageReports))
	mux.Handle("GET /ui/reports/{run}/{file...}", c.authed(false, c.pageReport))
	return mux
}

// errorPage shows err with the status its kind calls for.
func (c *Console) errorPage(w http.ResponseWriter, r *http.Request, ss *session, err error) {
	status := http.StatusBadGateway
	switch {
	case errors.Is(err, metaapi.ErrForbidden):
		status = http.StatusForbidden
	case errors.Is(err, metaapi.ErrNotFound):
		status = http.StatusNotFound
	case errors.Is(err, metaapi.ErrInvalid):
		status = http.StatusBadRequest
	}
	c.render(w, r, ss, "error", status, map[string]any{"Error": err.Error(), "Status": status})
}

// clusterView is what the cluster pages show, fetched together.
type clusterView struct {
	Nodes       []metaapi.NodeInfo
	Pipelines   []metaapi.Pipeline
	Containers  []metaapi.ContainerInfo
	Replication *metaapi.ReplicationStatus
}

// fetch gets the views named (nodes, pipelines, containers, replication).
func (c *Console) fetch(ctx context.Context, what ...string) (clusterView, error) {
	ctx, cancel := context.WithTimeout(ctx, viewTimeout)
	defer cancel()
	var v clusterView
	var err error
	for _, w := range what {
		var e error
		switch w {
		case "nodes":
			v.Nodes, e = c.cfg.Cluster.Nodes(ctx)
		case "pipelines":
			v.Pipelines, e = c.cfg.Cluster.Pipelines(ctx)
		case "containers":
			v.Containers, e = c.cfg.Cluster.Containers(ctx)
		case "replication":
			v.Replication, e = c.cfg.Cluster.Replication(ctx)
		}
		err = errors.Join(err, e)
	}
	return v, err
}

// alert is one line of the overview's alerts.
type alert struct{ Level, Text string }

// alerts are what an operator should look at now.
func alerts(v clusterView) []alert {
	var out []alert
	for _, n := range v.Nodes {
		if n.Health != "HEALTHY" {
			out = append(out, alert{"crit", fmt.Sprintf("datanode %d (%s) is %s, last heartbeat %s", n.NodeID, n.Addr, n.Health, n.LastHeartbeat.UTC().Format(time.RFC3339))})
		}
		if n.Full {
			out = append(out, alert{"warn", fmt.Sprintf("datanode %d is full (gets no new pipeline)", n.NodeID)})
		}
		for _, fv := range n.FailedVolumes {
			out = append(out, alert{"crit", fmt.Sprintf("datanode %d: volume %s failed", n.NodeID, fv.Dir)})
		}
		for _, fv := range n.ReadOnlyVolumes {
			out = append(out, alert{"warn", fmt.Sprintf("datanode %d: volume %s read-only (full)", n.NodeID, fv.Dir)})
		}
	}
	if r := v.Replication; r != nil {
		if r.SafeMode {
			out = append(out, alert{"warn", "safe mode: " + r.SafeModeReason})
		}
		if r.Unrecoverable > 0 {
			out = append(out, alert{"crit", fmt.Sprintf("%d containers unrecoverable (no healthy replica)", r.Unrecoverable)})
		}
		if r.UnderReplicated > 0 {
			out = append(out, alert{"warn", fmt.Sprintf("%d containers under-replicated", r.UnderReplicated)})
		}
		if r.AtRisk > 0 {
			out = append(out, alert{"warn", fmt.Sprintf("%d containers with a replica on a STALE datanode", r.AtRisk)})
		}
		if r.FailedCopies > 0 {
			out = append(out, alert{"warn", fmt.Sprintf("%d container copies failed since the start", r.FailedCopies)})
		}
	}
	return out
}

func (c *Console) pageOverview(w http.ResponseWriter, r *http.Request, ss *session) {
	v, err := c.fetch(r.Context(), "nodes", "pipelines", "replication")
	if err != nil {
		c.errorPage(w, r, ss, err)
		return
	}
	var capacity, avail, used uint64
	health := map[string]int{}
	for _, n := range v.Nodes {
		capacity += n.CapacityBytes
		avail += n.AvailableBytes
		used += n.UsedBytes
		health[n.Health]++
	}
	open := 0
	for _, p := range v.Pipelines {
		if p.State == "OPEN" {
			open++
		}
	}
	c.render(w, r, ss, "overview", http.StatusOK, map[string]any{"V": v, "Capacity": capacity, "Available": avail, "Used": used,
		"Health": health, "OpenPipelines": open, "Alerts": alerts(v), "Refresh": refreshSeconds})
}

func (c *Console) pageDatanodes(w http.ResponseWriter, r *http.Request, ss *session) {
	v, err := c.fetch(r.Context(), "nodes")
	if err != nil {
		c.errorPage(w, r, ss, err)
		return
	}
	c.render(w, r, ss, "datanodes", http.StatusOK, map[string]any{"V": v, "Refresh": refreshSeconds})
}

func (c *Console) pagePipelines(w http.ResponseWriter, r *http.Request, ss *session) {
	v, err := c.fetch(r.Context(), "pipelines", "containers")
	if err != nil {
		c.errorPage(w, r, ss, err)
		return
	}
	openC := map[uint64]int{}
	for _, ct := range v.Containers {
		if ct.State == "OPEN" {
			openC[ct.Pipeline]++
		}
	}
	c.render(w, r, ss, "pipelines", http.StatusOK, map[string]any{"V": v, "OpenContainers": openC, "Refresh": refreshSeconds})
}

func (c *Console) pageContainers(w http.ResponseWriter, r *http.Request, ss *session) {
	v, err := c.fetch(r.Context(), "containers")
	if err != nil {
		c.errorPage(w, r, ss, err)
		return
	}
	cs := slices.Clone(v.Containers)
	slices.SortStableFunc(cs, func(a, b metaapi.ContainerInfo) int {
		if a.UnderReplicated != b.UnderReplicated {
			if a.UnderReplicated {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.ID, b.ID)
	})
	under := 0
	for _, ct := range cs {
		if ct.UnderReplicated {
			under++
		}
	}
	c.render(w, r, ss, "containers", http.StatusOK, map[string]any{"Containers": cs, "Under": under, "Refresh": refreshSeconds})
}

func (c *Console) pageReplication(w http.ResponseWriter, r *http.Request, ss *session) {
	v, err := c.fetch(r.Context(), "replication")
	if err != nil {
		c.errorPage(w, r, ss, err)
		return
	}
	eta := "-"
	if rs := v.Replication; rs.PendingBytes > 0 && rs.RateBytesPerS > 0 {
		eta = (time.Duration(float64(rs.PendingBytes)/rs.RateBytesPerS) * time.Second).Round(time.Second).String()
	} else if rs.PendingBytes == 0 {
		eta = "nothing pending"
	}
	c.render(w, r, ss, "replication", http.StatusOK, map[string]any{"R": v.Replication, "ETA": eta, "Refresh": refreshSeconds})
}

func (c *Console) pageCharts(w http.ResponseWriter, r *http.Request, ss *session) {
	pts := c.sampler.Points()
	var last Point
	if len(pts) > 0 {
		last = pts[len(pts)-1]
	}
	var svgs []string
	for _, spec := range charts {
		svgs = append(svgs, renderSVG(spec, pts, c.cfg.Now()))
	}
	c.render(w, r, ss, "charts", http.StatusOK, map[string]any{"Charts": charts, "SVGs": svgs, "Last": last, "Samples": len(pts),
		"Every": c.sampler.Every().String(), "Refresh": refreshSeconds})
}

// chartSVG serves one chart as an SVG document (/ui/charts/ID.svg).
func (c *Console) chartSVG(w http.ResponseWriter, r *http.Request, ss *session) {
	spec, ok := chartByID(strings.TrimSuffix(r.PathValue("id"), ".svg"))
	if !ok {
		http.NotFound(w, r)
		return
	}
	securityHeaders(w)
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(renderSVG(spec, c.sampler.Points(), c.cfg.Now()))) // the client went away: nothing to do
}

// cleanRel says p is a relative path inside a directory (no "..", not
// absolute).
func cleanRel(p string) bool {
	return p != "" && !strings.HasPrefix(p, "/") && path.Clean(p) == p && !strings.HasPrefix(p, "..")
}
