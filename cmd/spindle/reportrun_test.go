package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// parseSVGs parses every .svg of dir with encoding/xml and returns their
// base names; it fails the test on a document that is not well-formed or
// whose root is not <svg>.
func parseSVGs(t *testing.T, dir string) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.svg"))
	var names []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := xml.NewDecoder(bytes.NewReader(data))
		root := ""
		for range 1 << 20 {
			tok, err := dec.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: not well-formed XML: %v", f, err)
			}
			if el, ok := tok.(xml.StartElement); ok && root == "" {
				root = el.Name.Local
			}
		}
		if root != "svg" {
			t.Errorf("%s: root element %q, want svg", f, root)
		}
		names = append(names, filepath.Base(f))
	}
	return names
}

// TestReportRunAndCompare runs two tiny report runs end to end (the
// baselines, loopback TCP, queue-dirs and, in the first, follower-append
// against this test binary acting as the datanode, under strace when it
// can trace here), imports a seed-000 profile, and compares the three.
func TestReportRunAndCompare(t *testing.T) {
	t.Setenv(asSpindleEnv, "1") // the datanode child is this binary
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	stdout, stderr, err := run(t, []string{"report", "run", "--out", a, "--scale", "0.02",
		"--scenarios", "queue-dirs-10x1,follower-append-b1", "--dir", filepath.Join(dir, "data")})
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if !strings.Contains(stdout, "a: 5 of 5 steps done") || !strings.Contains(stderr, "report run: [5/5] follower-append-b1: done") {
		t.Errorf("stdout %q\nstderr %q", stdout, stderr)
	}
	if _, _, err := run(t, []string{"report", "run", "--out", b, "--scale", "0.02", "--scenarios", "queue-dirs-10x1", "--no-trace"}); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(a, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	report := string(md)
	for _, want := range []string{"`spindle report run --dir=", "## Environment", "## Baselines", "| tcp-loopback | `127.0.0.1` |",
		"## Benches against their baselines", "| follower-append-b1 |", "## System-call profiles", "### queue-dirs-10x1"} {
		if !strings.Contains(report, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	traced := exec.Command("strace", "-f", "-c", "-o", os.DevNull, "true").Run() == nil
	if traced != strings.Contains(report, "### follower-append-b1") {
		t.Errorf("strace can trace here: %v, but the report's follower-append profile says otherwise", traced)
	}
	if !traced && !strings.Contains(report, "No tracer in this run") {
		t.Error("the report does not say why there is no syscall profile")
	}
	if len(parseSVGs(t, a)) == 0 {
		t.Error("report run wrote no chart")
	}

	imp := filepath.Join(dir, "ozone")
	seed := filepath.Join("..", "..", "internal", "syscallprof", "testdata", "seed000-batch1.txt")
	if _, _, err := run(t, []string{"report", "import-strace", seed, "--name", "ozone-b1", "--ops", "30000", "--out", imp}); err != nil {
		t.Fatal(err)
	}
	cmp := filepath.Join(dir, "cmp")
	stdout, stderr, err = run(t, []string{"report", "compare", imp, filepath.Join(a, "results.json"), b, "--out", cmp})
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	for _, want := range []string{"# Comparison: ozone-b1 vs a vs b", "### queue-dirs-10x1", "| figure | a | b | Δ b | verdict |", "b: single run"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("compare output lacks %q:\n%s", want, stdout)
		}
	}
	if traced && !strings.Contains(stdout, "| ozone-b1 | strace -c; imported; table truncated | 2,727,877 | 30,000 | 90.93 |") {
		t.Errorf("the imported seed-000 profile is not compared with follower-append's:\n%s", stdout)
	}
	svgs := parseSVGs(t, cmp)
	if len(svgs) < 4 || !strings.Contains(strings.Join(svgs, " "), "compare-ops_per_s.svg") {
		t.Errorf("compare charts %v", svgs)
	}
	if saved, _ := os.ReadFile(filepath.Join(cmp, "compare.md")); string(saved) != stdout {
		t.Error("compare.md is not the Markdown printed")
	}
	// The results are the schema compare reads back; the run recorded its
	// steps and environment.
	data, err := os.ReadFile(filepath.Join(b, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if doc["source"] != "spindle report run" || doc["environment"] == nil || len(doc["steps"].([]any)) != 4 {
		t.Errorf("results.json %v", doc)
	}
}

func TestReportRunList(t *testing.T) {
	stdout, _, err := run(t, []string{"report", "run", "--list", "--suite", "full"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout, "follower-append-b10: seed 000") || !strings.Contains(stdout, "30000 messages") {
		t.Errorf("--list: %s", stdout)
	}
	if _, _, err := run(t, []string{"report", "run", "--suite", "huge", "--out", t.TempDir()}); err == nil {
		t.Error("unknown suite accepted")
	}
}
