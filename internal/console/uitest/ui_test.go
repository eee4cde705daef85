package uitest

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// cluster is the spindle server under test.
type cluster struct {
	t        *testing.T
	bin, dir string
	env      []string
	meta     string
	console  string // https://HOST:PORT/ui/
	pid      int
	access   string
	secret   string
}

// admin runs `spindle ARGS --meta M --json` and decodes its output.
func (c *cluster) admin(out any, args ...string) {
	c.t.Helper()
	cmd := exec.Command(c.bin, append(args, "--meta", c.meta, "--json")...)
	cmd.Env = c.env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		c.t.Fatalf("spindle %v: %v: %s", args, err, stderr.String())
	}
	if err := json.Unmarshal(b, out); err != nil {
		c.t.Fatalf("spindle %v: %v: %s", args, err, b)
	}
}

func (c *cluster) run(args ...string) {
	c.t.Helper()
	cmd := exec.Command(c.bin, args...)
	cmd.Env = c.env
	if out, err := cmd.CombinedOutput(); err != nil {
		c.t.Fatalf("spindle %v: %v: %s", args, err, out)
	}
}

// stopProc sends SIGTERM to a process this test started and waits (then
// SIGKILL after a bound).
func stopProc(cmd *exec.Cmd, bound time.Duration) {
	if cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM) // started by this test; already gone is fine
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }() // killed on purpose: its status is not the point
	select {
	case <-exited:
	case <-time.After(bound):
		_ = cmd.Process.Kill() // same process
		<-exited
	}
}

var consoleURL = regexp.MustCompile(`console at (https://\S+/ui/)`)

func startCluster(t *testing.T, bin, reports string) *cluster {
	t.Helper()
	dir := t.TempDir()
	c := &cluster{t: t, bin: bin, dir: dir, env: append(os.Environ(), "SPINDLE_CLIENT_CONFIG_DIR="+filepath.Join(dir, "profiles"))}
	ready := filepath.Join(dir, "ready")
	logPath := filepath.Join(dir, "server.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "server", "--dir", filepath.Join(dir, "srv"), "--datanodes", "4", "--meta-listen", "127.0.0.1:0",
		"--s3-listen", "off", "--console-listen", "127.0.0.1:0", "--console-reports", reports, "--ready-file", ready, "--log-level", "warn")
	cmd.Env, cmd.Stdout, cmd.Stderr = c.env, logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopProc(cmd, 60*time.Second)
		if err := logf.Close(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("server log (tail):\n%s", tail(string(b), 4000))
			}
		}
	})
	c.pid = cmd.Process.Pid
	eventually(t, "spindle server ready, console URL logged", 120*time.Second, func() (bool, string) {
		r, err1 := os.ReadFile(ready)
		l, err2 := os.ReadFile(logPath)
		m := consoleURL.FindSubmatch(l)
		if err1 != nil || err2 != nil || m == nil {
			return false, tail(string(l), 500)
		}
		c.meta = strings.TrimSpace(strings.SplitN(string(r), "\n", 2)[0])
		c.console = string(m[1])
		return c.meta != "", string(r)
	})
	var creds struct{ AccessKey, SecretKey string }
	raw, err := os.ReadFile(filepath.Join(dir, "srv", "s3-credentials.json"))
	if err == nil {
		err = json.Unmarshal(raw, &struct {
			A *string `json:"access_key"`
			S *string `json:"secret_key"`
		}{&creds.AccessKey, &creds.SecretKey})
	}
	if err != nil {
		t.Fatal(err)
	}
	c.access, c.secret = creds.AccessKey, creds.SecretKey
	return c
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// pageFigures are a page's weight and timings, cache disabled.
type pageFigures struct {
	Page       string  `json:"page"`
	Requests   int     `json:"requests"`
	Bytes      int     `json:"bytes"`
	FCPms      float64 `json:"first_contentful_paint_ms"`
	DCLms      float64 `json:"dom_content_loaded_ms"`
	Screenshot string  `json:"screenshot"`
}

const figuresJS = `(() => {
  const nav = performance.getEntriesByType("navigation")[0];
  const res = performance.getEntriesByType("resource");
  const fcp = performance.getEntriesByName("first-contentful-paint")[0] || performance.getEntriesByName("first-paint")[0];
  return {requests: 1 + res.length, bytes: nav.encodedBodySize + res.reduce((a, r) => a + r.encodedBodySize, 0),
    fcp: fcp ? fcp.startTime : -1, dcl: nav.domContentLoadedEventEnd};
})()`

// The console in Chromium against spindle server (4 datanodes) with a
// loader writing: every page without a console error and with the
// figures of spindle admin --json, a key uploaded and downloaded through
// the pages byte for byte, a killed datanode shown STALE then DEAD and its
// re-replication, screenshots and page figures kept.
func TestConsoleInBrowser(t *testing.T) {
	if os.Getenv("SPINDLE_UI_TEST") == "" {
		t.Skip("the browser test: make test-ui (SPINDLE_UI_TEST=1, headless Chromium)")
	}
	bin := os.Getenv("SPINDLE_BIN")
	if bin == "" {
		t.Fatal("SPINDLE_BIN: the spindle binary to test (make test-ui builds bin/spindle)")
	}
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("no chromium on the PATH (make test-ui installs Debian's chromium)")
	}
	art := os.Getenv("SPINDLE_UI_ARTIFACTS")
	if art == "" {
		art = t.TempDir()
	}
	if err := os.MkdirAll(art, 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	reports := t.TempDir()
	rep := exec.Command(bin, "report", "run", "--suite", "quick", "--scenarios", "queue-dirs", "--scale", "0.05", "--no-trace",
		"--dir", t.TempDir(), "--out", filepath.Join(reports, "smoke"))
	if out, err := rep.CombinedOutput(); err != nil {
		t.Fatalf("spindle report run: %v: %s", err, out)
	}
	c := startCluster(t, bin, reports)
	t.Logf("server ready in %v; console %s", time.Since(start).Round(time.Millisecond), c.console)
	c.run("bucket", "create", "web", "--meta", c.meta)
	// The loader: 128 KiB keys (above the inline bound: chunks on the
	// datanodes), at most 12000 of them (4.5 GB with the replicas).
	loaderLog, err := os.Create(filepath.Join(t.TempDir(), "loader.log"))
	if err != nil {
		t.Fatal(err)
	}
	loader := exec.Command(bin, "bench", "key-write", "--meta", c.meta, "--bucket", "load", "--keys", "12000", "--size", "128KiB",
		"--concurrency", "2", "--duration", "150s", "--no-baseline", "--keep", "--json")
	loader.Env, loader.Stdout, loader.Stderr = c.env, loaderLog, loaderLog
	if err := loader.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopProc(loader, 30*time.Second)
		if t.Failed() {
			if b, err := os.ReadFile(loaderLog.Name()); err == nil {
				t.Logf("loader output (tail):\n%s", tail(string(b), 2000))
			}
		}
		if err := loaderLog.Close(); err != nil {
			t.Error(err)
		}
	})

	b := startBrowser(t, chromium)
	base := strings.TrimSuffix(c.console, "/ui/")
	var figures []pageFigures
	shoot := func(name string) pageFigures {
		t.Helper()
		if errs := b.takeErrors(); len(errs) > 0 {
			t.Errorf("page %s: console errors: %q", name, errs)
		}
		var f struct {
			Requests int
			Bytes    int
			FCP, DCL float64
		}
		b.eval(figuresJS, &f)
		path := filepath.Join(art, name+".png")
		b.screenshot(path)
		pf := pageFigures{Page: name, Requests: f.Requests, Bytes: f.Bytes, FCPms: f.FCP, DCLms: f.DCL, Screenshot: path}
		figures = append(figures, pf)
		return pf
	}
	visit := func(name, path string) {
		t.Helper()
		b.clearErrors()
		b.navigate(base + path)
		shoot(name)
	}

	// Sign in through the form.
	visit("login", "/ui/login")
	b.mark()
	b.eval(fmt.Sprintf(`document.getElementById("access_key").value = %q; document.getElementById("secret_key").value = %q; document.querySelector("form.login").requestSubmit(); true`, c.access, c.secret), nil)
	b.waitLoaded("sign-in")
	var here string
	b.eval("location.pathname", &here)
	if here != "/ui/" {
		var text string
		b.eval("document.body.innerText", &text)
		t.Fatalf("after sign-in at %q, want /ui/: %s; errors %q", here, text, b.takeErrors())
	}

	// datanodes: each row as the admin view has it (polled: the figures
	// move under the loader).
	nodesJS := `JSON.stringify([...document.querySelectorAll("tr[data-node]")].map(tr => {
	  const f = k => { const e = tr.querySelector('[data-f="' + k + '"]'); return e ? e.textContent.trim() : null; };
	  return {id: +tr.dataset.node, addr: f("addr"), health: f("health"), pipelines: f("pipelines"), containers: f("containers")};
	}))`
	type nodeRow struct {
		ID         uint64 `json:"id"`
		Addr       string `json:"addr"`
		Health     string `json:"health"`
		Pipelines  string `json:"pipelines"`
		Containers string `json:"containers"`
	}
	join := func(v []uint64) string {
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = strconv.FormatUint(x, 10)
		}
		return strings.Join(s, ", ")
	}
	pageNodes := func() []nodeRow {
		var s string
		b.eval(nodesJS, &s)
		var rows []nodeRow
		if err := json.Unmarshal([]byte(s), &rows); err != nil {
			t.Fatal(err)
		}
		return rows
	}
	adminNodes := func() []metaapi.NodeInfo {
		var ns []metaapi.NodeInfo
		c.admin(&ns, "admin", "nodes")
		return ns
	}
	matches := func(what, path string, check func() (bool, string)) {
		t.Helper()
		eventually(t, what+" as spindle admin --json has it", 60*time.Second, func() (bool, string) {
			b.navigate(base + path)
			return check()
		})
	}
	b.clearErrors()
	matches("datanodes", "/ui/datanodes", func() (bool, string) {
		rows, ns := pageNodes(), adminNodes()
		if len(rows) != len(ns) || len(ns) != 4 {
			return false, fmt.Sprintf("page %d rows, admin %d nodes", len(rows), len(ns))
		}
		for i, n := range ns {
			r := rows[i]
			if r.ID != n.NodeID || r.Addr != n.Addr || r.Health != n.Health || r.Pipelines != join(n.Pipelines) || r.Containers != strconv.Itoa(n.Containers) {
				return false, fmt.Sprintf("page %+v, admin %+v", r, n)
			}
		}
		return true, ""
	})
	shoot("datanodes")

	b.clearErrors()
	matches("overview", "/ui/", func() (bool, string) {
		rows, ns := pageNodes(), adminNodes()
		var count string
		b.eval(`document.querySelector('[data-f="nodes"]').textContent`, &count)
		if count != strconv.Itoa(len(ns)) || len(rows) != len(ns) {
			return false, fmt.Sprintf("page %s nodes, admin %d", count, len(ns))
		}
		for i, n := range ns {
			if rows[i].ID != n.NodeID || rows[i].Health != n.Health {
				return false, fmt.Sprintf("page %+v, admin %+v", rows[i], n)
			}
		}
		return true, ""
	})
	shoot("overview")

	b.clearErrors()
	matches("pipelines", "/ui/pipelines", func() (bool, string) {
		var s string
		b.eval(`JSON.stringify([...document.querySelectorAll("tr[data-pipeline]")].map(tr => [tr.dataset.pipeline,
		  tr.querySelector('[data-f="state"]').textContent, tr.querySelector('[data-f="leader"]').textContent, tr.querySelector('[data-f="members"]').textContent]))`, &s)
		var ps []metaapi.Pipeline
		c.admin(&ps, "admin", "pipelines")
		var want [][]string
		for _, p := range ps {
			leader := "none"
			if p.Leader != 0 {
				leader = strconv.FormatUint(p.Leader, 10)
			}
			var ms []string
			for _, m := range p.Members {
				ms = append(ms, fmt.Sprintf("%d=%s", m.NodeID, m.Addr))
			}
			want = append(want, []string{strconv.FormatUint(p.ID, 10), p.State, leader, strings.Join(ms, ", ")})
		}
		w, _ := json.Marshal(want)
		return s == string(w), "page " + s + ", admin " + string(w)
	})
	shoot("pipelines")

	containersJS := `JSON.stringify([...document.querySelectorAll("tr[data-container]")].map(tr => [+tr.dataset.container,
	  tr.querySelector('[data-f="state"]').textContent.replace(" UNDER-REPLICATED", ""), tr.classList.contains("under"), tr.querySelector('[data-f="bcsid"]').textContent]))`
	containersMatch := func() (bool, string) {
		var s string
		b.eval(containersJS, &s)
		var cs []metaapi.ContainerInfo
		c.admin(&cs, "admin", "containers")
		byID := map[string]metaapi.ContainerInfo{}
		for _, ct := range cs {
			byID[strconv.FormatUint(ct.ID, 10)] = ct
		}
		var rows [][]any
		if err := json.Unmarshal([]byte(s), &rows); err != nil {
			t.Fatal(err)
		}
		if len(rows) != len(cs) || len(cs) == 0 {
			return false, fmt.Sprintf("page %d containers, admin %d", len(rows), len(cs))
		}
		seenHealthy := false
		for _, r := range rows {
			ct, ok := byID[fmt.Sprint(r[0])]
			if !ok || r[1] != ct.State || r[2] != ct.UnderReplicated || r[3] != strconv.FormatUint(ct.BCSID, 10) {
				return false, fmt.Sprintf("page %v, admin %+v", r, ct)
			}
			if r[2] == true && seenHealthy {
				return false, "an under-replicated container after a healthy one"
			}
			seenHealthy = seenHealthy || r[2] == false
		}
		return true, ""
	}
	b.clearErrors()
	matches("containers", "/ui/containers", containersMatch)
	shoot("containers")

	replicationMatch := func(extra func(r metaapi.ReplicationStatus) bool) func() (bool, string) {
		return func() (bool, string) {
			var s string
			b.eval(`JSON.stringify(["safe-mode","under-replicated","unrecoverable","factor","copied","inflight"].map(k => document.querySelector('[data-f="' + k + '"]').textContent))`, &s)
			var r metaapi.ReplicationStatus
			c.admin(&r, "admin", "replication")
			safe := "off"
			if r.SafeMode {
				safe = "ON"
			}
			w, _ := json.Marshal([]string{safe, strconv.Itoa(r.UnderReplicated), strconv.Itoa(r.Unrecoverable), strconv.Itoa(r.ReplicationFactor),
				strconv.FormatUint(r.CopiedContainers, 10), strconv.Itoa(len(r.Inflight))})
			return s == string(w) && (extra == nil || extra(r)), "page " + s + ", admin " + string(w)
		}
	}
	b.clearErrors()
	matches("re-replication", "/ui/replication", replicationMatch(nil))
	shoot("replication")

	// Buckets: the loader's bucket with the keys the meta service counts
	// (between its counts just before and just after the page: the
	// loader adds keys all the time).
	b.clearErrors()
	eventually(t, "buckets as spindle bucket ls --json has them", 60*time.Second, func() (bool, string) {
		counts := func() map[string]uint64 {
			var bl []metaapi.Bucket
			c.admin(&bl, "bucket", "ls")
			m := map[string]uint64{}
			for _, bk := range bl {
				m[bk.Name] = bk.Keys
			}
			return m
		}
		before := counts()
		b.navigate(base + "/ui/buckets")
		after := counts()
		var rows [][]string
		var s string
		b.eval(`JSON.stringify([...document.querySelectorAll("tr[data-bucket]")].map(tr => [tr.dataset.bucket, tr.querySelector('[data-f="keys"]').textContent]))`, &s)
		if err := json.Unmarshal([]byte(s), &rows); err != nil {
			t.Fatal(err)
		}
		if len(rows) != len(after) || after["load"] == 0 {
			return false, fmt.Sprintf("page %v, admin %v", rows, after)
		}
		for _, r := range rows {
			n, err := strconv.ParseUint(r[1], 10, 64)
			if err != nil || n < before[r[0]] || n > after[r[0]] {
				return false, fmt.Sprintf("page %v, admin before %v, after %v", rows, before, after)
			}
		}
		return true, ""
	})
	shoot("buckets")

	// Upload through the page's form, download through its link.
	data := make([]byte, 3<<20+12345)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	upPath := filepath.Join(t.TempDir(), "upload.bin")
	if err := os.WriteFile(upPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	visit("keys-web", "/ui/buckets/web?prefix=dir/")
	var fileInput struct {
		Result struct{ ObjectID string }
	}
	b.call("Runtime.evaluate", map[string]any{"expression": `document.getElementById("file")`}, &fileInput)
	b.call("DOM.setFileInputFiles", map[string]any{"files": []string{upPath}, "objectId": fileInput.Result.ObjectID}, nil)
	b.mark()
	b.eval(`document.getElementById("name").value = "browser.bin"; document.querySelector("form.upload").requestSubmit(); true`, nil)
	b.waitLoaded("upload")
	var notice string
	b.eval(`(document.querySelector('[role="status"]') || {}).textContent || ""`, &notice)
	if want := fmt.Sprintf("uploaded dir/browser.bin (%d bytes)", len(data)); notice != want {
		t.Fatalf("after the upload: %q, want %q", notice, want)
	}
	shoot("keys-uploaded")
	visit("object", "/ui/object/web/dir/browser.bin")
	var got string
	b.eval(`fetch(document.getElementById("download").href, {credentials: "same-origin"}).then(r => r.arrayBuffer()).then(buf => {
	  let s = ""; const u = new Uint8Array(buf); for (let i = 0; i < u.length; i += 32768) s += String.fromCharCode.apply(null, u.subarray(i, i + 32768)); return btoa(s); })`, &got)
	down, err := base64.StdEncoding.DecodeString(got)
	if err != nil || !bytes.Equal(down, data) {
		t.Fatalf("downloaded %d bytes (%v), want the %d uploaded, equal", len(down), err, len(data))
	}
	var stat metaapi.KeyInfo
	c.admin(&stat, "stat", "web/dir/browser.bin")
	var size string
	b.eval(`document.querySelector('[data-f="size"]').textContent`, &size)
	if !strings.HasPrefix(size, strconv.FormatUint(stat.Size, 10)+" bytes") || stat.Size != uint64(len(data)) {
		t.Fatalf("object page size %q, spindle stat %d", size, stat.Size)
	}

	// Live charts: the loader's puts in the samples.
	b.clearErrors()
	eventually(t, "the charts showing the loader's puts", 60*time.Second, func() (bool, string) {
		b.navigate(base + "/ui/charts")
		var v []string
		b.eval(`["samples","put-ops","write-mbps"].map(k => document.querySelector('[data-f="' + k + '"]').textContent)`, &v)
		n, _ := strconv.Atoi(v[0])
		puts, _ := strconv.ParseFloat(v[1], 64)
		return n >= 2 && puts > 0, fmt.Sprint(v)
	})
	shoot("charts")

	// Reports: the run and its charts, every image loaded.
	visit("reports", "/ui/reports")
	b.clearErrors()
	b.navigate(base + "/ui/reports/smoke/")
	eventually(t, "the report's charts loaded", 30*time.Second, func() (bool, string) {
		var v []int
		b.eval(`[document.images.length, [...document.images].filter(i => i.complete && i.naturalWidth > 0).length]`, &v)
		return v[0] > 0 && v[0] == v[1], fmt.Sprint(v)
	})
	shoot("report")

	// A phone-sized screen: no page wider than the screen (tables scroll
	// in their own box).
	b.call("Emulation.setDeviceMetricsOverride", map[string]any{"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": true}, nil)
	for _, p := range []string{"/ui/", "/ui/datanodes", "/ui/containers"} {
		b.clearErrors()
		b.navigate(base + p)
		var w []int
		b.eval(`[document.documentElement.scrollWidth, window.innerWidth]`, &w)
		if w[0] > w[1] {
			t.Errorf("%s on a 390 px screen: %d px wide", p, w[0])
		}
		shoot("phone" + strings.ReplaceAll(strings.TrimSuffix(p, "/"), "/", "-"))
	}
	b.call("Emulation.clearDeviceMetricsOverride", nil, nil)

	// Kill datanode 4 (a child of the server this test started): STALE,
	// then DEAD, then its containers' re-replication on the pages.
	raw, err := os.ReadFile(filepath.Join(c.dir, "srv", "datanodes", "dn4.ready"))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(raw))
	victimAddr := fields[0]
	victim, err := strconv.Atoi(fields[1])
	if err != nil {
		t.Fatal(err)
	}
	stat2, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", victim))
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(string(stat2[bytes.LastIndexByte(stat2, ')')+1:])); len(f) < 2 || f[1] != strconv.Itoa(c.pid) {
		t.Fatalf("pid %d is not the test server's datanode (stat %q)", victim, stat2)
	}
	var victimID uint64
	for _, n := range adminNodes() {
		if n.Addr == victimAddr {
			victimID = n.NodeID
		}
	}
	if victimID == 0 {
		t.Fatalf("no datanode at %s", victimAddr)
	}
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	healthJS := fmt.Sprintf(`(document.querySelector('tr[data-node="%d"] [data-f="health"]') || {}).textContent`, victimID)
	watch := func(state string, within time.Duration) time.Duration {
		t.Helper()
		b.clearErrors()
		eventually(t, fmt.Sprintf("datanode %d %s on the datanodes page", victimID, state), within, func() (bool, string) {
			b.navigate(base + "/ui/datanodes")
			var h string
			b.eval(healthJS, &h)
			return h == state, h
		})
		d := time.Since(killed)
		shoot("datanodes-" + strings.ToLower(state))
		return d
	}
	staleAt := watch("STALE", metaapi.DefaultStaleAfter+30*time.Second)
	deadAt := watch("DEAD", metaapi.DefaultDeadAfter+30*time.Second)
	t.Logf("datanode %d killed: STALE on the page after %v (stale-after %v), DEAD after %v (dead-after %v)",
		victimID, staleAt.Round(100*time.Millisecond), metaapi.DefaultStaleAfter, deadAt.Round(100*time.Millisecond), metaapi.DefaultDeadAfter)
	b.clearErrors()
	matches("re-replication after the loss", "/ui/replication", replicationMatch(func(r metaapi.ReplicationStatus) bool {
		return r.UnderReplicated > 0 || r.CopiedContainers > 0 || len(r.Inflight) > 0
	}))
	shoot("replication-after-loss")
	// The lost replicas copied: the page's figures move with the meta
	// service's (its pipelines closed, their containers copied to the
	// datanode outside them).
	b.clearErrors()
	eventually(t, "re-replication copies on the page", 120*time.Second, func() (bool, string) {
		b.navigate(base + "/ui/replication")
		ok, detail := replicationMatch(func(r metaapi.ReplicationStatus) bool { return r.CopiedContainers > 0 })()
		return ok, detail
	})
	copiedAt := time.Since(killed)
	shoot("replication-copied")
	t.Logf("re-replication: copies done on the page %v after the kill", copiedAt.Round(100*time.Millisecond))
	b.clearErrors()
	matches("containers after the loss", "/ui/containers", containersMatch)
	shoot("containers-after-loss")
	b.clearErrors()
	matches("overview alerts after the loss", "/ui/", func() (bool, string) {
		var s string
		b.eval(`document.querySelector('[data-f="alerts"]').textContent`, &s)
		return strings.Contains(s, fmt.Sprintf("datanode %d", victimID)) && strings.Contains(s, "DEAD"), s
	})
	shoot("overview-after-loss")

	// The figures.
	var table strings.Builder
	fmt.Fprintf(&table, "%-24s %8s %10s %10s %10s\n", "page", "requests", "bytes", "FCP ms", "DCL ms")
	for _, f := range figures {
		fmt.Fprintf(&table, "%-24s %8d %10d %10.0f %10.0f\n", f.Page, f.Requests, f.Bytes, f.FCPms, f.DCLms)
	}
	t.Logf("pages (cache disabled; weight = encoded bodies of the page and its assets):\n%s", table.String())
	summary, err := json.MarshalIndent(map[string]any{"pages": figures, "stale_after_kill_s": staleAt.Seconds(), "dead_after_kill_s": deadAt.Seconds(), "copies_after_kill_s": copiedAt.Seconds(),
		"elapsed_s": time.Since(start).Seconds()}, "", "  ")
	if err == nil {
		err = os.WriteFile(filepath.Join(art, "figures.json"), summary, 0o644)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(art, "figures.txt"), []byte(table.String()), 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots and figures in %s; %v in all", art, time.Since(start).Round(time.Second))
}
