package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/testutil"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// TestAlertRulesMatchMetrics: every metric the alert rules
// (deploy/prometheus/alerts.yml) and the Grafana dashboard
// (deploy/grafana/spindle.json) read is exported by a real `spindle
// server` (its meta service's /metrics or a datanode's), so that no rule
// or panel watches a name that does not exist; and, where promtool is
// installed (make deps installs it), the rules pass their unit tests
// (deploy/prometheus/alerts_test.yml: each rule fires on what should fire
// it). A renamed metric fails here.
func TestAlertRulesMatchMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a spindle server")
	}
	metaAddr, _ := startServerProcess(t)
	p, _, found, err := tlsconf.LoadClientProfile(metaAddr)
	if err != nil || !found {
		t.Fatalf("client profile for %s: found %v, %v", metaAddr, found, err)
	}
	sec, err := tlsconf.NewSettings(tlsconf.Files{Cert: p.Cert, Key: p.Key, CA: p.CA})
	if err != nil {
		t.Fatal(err)
	}
	mc, err := metaapi.NewClient(metaAddr, metaapi.ClientOptions{TLS: sec})
	if err != nil {
		t.Fatal(err)
	}
	// A key written and read (past the inline size: through a pipeline):
	// the request histograms have samples.
	for _, args := range [][]string{{"bucket", "create", "mon"}, {"put", "mon/k", "-"}, {"get", "mon/k", "-"}} {
		if _, stderr, err := runIn(t, bytes.Repeat([]byte("metrics "), 32<<10), append(args, "--meta", metaAddr)...); err != nil {
			t.Fatalf("%v: %v: %s", args, err, stderr)
		}
	}
	urls := []string{"https://" + metaAddr + "/metrics"}
	ns, err := mc.Nodes(t.Context())
	if err != nil || len(ns) == 0 {
		t.Fatalf("datanodes: %v, %v", ns, err)
	}
	for _, n := range ns {
		urls = append(urls, n.MetricsURL)
	}
	exported := map[string]bool{"up": true}
	hc := &http.Client{Transport: sec.HTTPTransport(&http.Transport{}), Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	for _, u := range urls {
		resp, err := hc.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		b, err := io.ReadAll(resp.Body)
		testutil.CloseT(t, resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
				f := strings.Fields(name)
				exported[f[0]] = true
				if len(f) > 1 && f[1] == "histogram" {
					for _, s := range []string{"_bucket", "_sum", "_count"} {
						exported[f[0]+s] = true
					}
				}
			}
		}
	}
	used := regexp.MustCompile(`\bspindle_[a-z0-9_]+`)
	for _, f := range []string{"../../deploy/prometheus/alerts.yml", "../../deploy/grafana/spindle.json"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, ".json") && !json.Valid(b) {
			t.Errorf("%s: not valid JSON", f)
		}
		var names []string
		for _, n := range used.FindAllString(string(b), -1) {
			if !exported[n] && !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
		for _, n := range names {
			t.Errorf("%s reads %s, which spindle server does not export", f, n)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Logf("promtool not installed: the rules' unit tests (deploy/prometheus/alerts_test.yml) not run here (make check-alerts)")
		return
	}
	cmd := exec.Command(promtool, "test", "rules", "alerts_test.yml")
	cmd.Dir = "../../deploy/prometheus"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
}
