package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestCountSample(t *testing.T) {
	pkgs, types, err := Count("testdata/mod", []string{"skipme"})
	if err != nil {
		t.Fatal(err)
	}
	wantPkgs := []Package{
		{Path: "sample", Files: 2, Lines: 19, TestLines: 8},
		{Path: "sample/sub", Files: 1, Lines: 5},
	}
	if !reflect.DeepEqual(pkgs, wantPkgs) {
		t.Errorf("packages:\n got %+v\nwant %+v", pkgs, wantPkgs)
	}
	wantTypes := []Type{
		{Pkg: "sample", Name: "T", Methods: 3},
		{Pkg: "sample", Name: "G", Methods: 2},
		{Pkg: "sample/sub", Name: "U", Methods: 1},
	}
	if !reflect.DeepEqual(types, wantTypes) {
		t.Errorf("types:\n got %+v\nwant %+v", types, wantTypes)
	}

	// Without -skip the skipped directory counts; testdata never does.
	pkgs, _, err = Count("testdata/mod", nil)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, p := range pkgs {
		paths = append(paths, p.Path)
	}
	if want := []string{"sample", "sample/sub", "skipme"}; !reflect.DeepEqual(paths, want) {
		t.Errorf("packages without skip: got %q, want %q", paths, want)
	}
}

func TestCheckRatchet(t *testing.T) {
	lim := Limits{MaxLines: 100, MaxMethods: 5}
	pkgs := []Package{
		{Path: "new", Lines: 101},    // over, not listed
		{Path: "grew", Lines: 150},   // over, past its baseline
		{Path: "shrank", Lines: 120}, // over, under its baseline
		{Path: "same", Lines: 130},   // over, at its baseline
		{Path: "fixed", Lines: 100},  // within the bound, still listed
		{Path: "small", Lines: 10},   // nothing to say
	}
	types := []Type{{Pkg: "grew", Name: "Big", Methods: 6}}
	base := Baseline{
		"package grew":   140,
		"package shrank": 130,
		"package same":   130,
		"package fixed":  110,
		"package gone":   200,
		"package meta/x": 4000,
		"type grew.Big":  6,
	}
	verdicts, stale := Check(pkgs, types, lim, base, []string{"meta"})
	problem := func(key string) bool { return verdicts[key].Problem != "" }
	for key, want := range map[string]bool{
		"package new": true, "package grew": true, "package shrank": false,
		"package same": false, "package fixed": true, "type grew.Big": false,
	} {
		if got := problem(key); got != want {
			t.Errorf("%s: problem %v (%+v), want %v", key, got, verdicts[key], want)
		}
	}
	if _, ok := verdicts["package small"]; ok {
		t.Errorf("package small: got a verdict %+v", verdicts["package small"])
	}
	if !strings.Contains(verdicts["package fixed"].Problem, "remove its line") {
		t.Errorf("package fixed: %q does not say to remove it", verdicts["package fixed"].Problem)
	}
	if !strings.Contains(verdicts["package shrank"].Note, "lower the figure") {
		t.Errorf("package shrank: %q does not say to lower it", verdicts["package shrank"].Note)
	}
	if len(stale) != 2 || !strings.Contains(stale[0], `"package gone"`) || !strings.Contains(stale[1], "skipped prefix") {
		t.Errorf("stale: %q", stale)
	}
}

func TestRunExitCodes(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "baseline.txt")
	var out, errOut bytes.Buffer
	// T has 3 methods: over a bound of 2, and not in an empty baseline.
	if code := run([]string{"-root", "testdata/mod", "-baseline", base, "-max-methods", "2"}, &out, &errOut); code != 1 {
		t.Fatalf("exit %d, want 1; output:\n%s%s", code, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "type sample.T: 3 methods, over the bound of 2") {
		t.Errorf("output does not name the type over its bound:\n%s", out.String())
	}
	if err := os.WriteFile(base, []byte("# ratchet\ntype sample.T 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := run([]string{"-root", "testdata/mod", "-baseline", base, "-max-methods", "2"}, &out, &errOut); code != 0 {
		t.Fatalf("with T in the baseline: exit %d, want 0; output:\n%s%s", code, out.String(), errOut.String())
	}
	if err := os.WriteFile(base, []byte("type T\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := run([]string{"-root", "testdata/mod", "-baseline", base}, &out, &errOut); code != 2 {
		t.Errorf("malformed baseline: exit %d, want 2", code)
	}
}
