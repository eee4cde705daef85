package report

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/syscallprof"
)

var seedTables = []struct {
	file          string
	calls, errors int64
}{
	{"seed000-batch1.txt", 2727877, 257953},
	{"seed000-batch10.txt", 1691167, 212785},
	{"seed000-batch1-repeat.txt", 2738788, 260830},
}

func seedPath(name string) string { return filepath.Join("..", "syscallprof", "testdata", name) }

func TestImportSeed000(t *testing.T) {
	for _, tc := range seedTables {
		r, err := ImportStrace(ImportOptions{File: seedPath(tc.file), Ops: 30000})
		if err != nil {
			t.Fatal(err)
		}
		s := r.Syscalls
		if r.Name != strings.TrimSuffix(tc.file, ".txt") || r.Source != SourceStraceImport || r.ImportedFrom != seedPath(tc.file) {
			t.Errorf("%s: run header %+v", tc.file, r)
		}
		if s.Total != tc.calls || s.Errors != tc.errors || !s.Truncated || s.Rows.Calls >= s.Total || s.Tool != syscallprof.ToolStraceC {
			t.Errorf("%s: syscalls total %d errors %d rows %+v truncated %v, want %d and %d", tc.file, s.Total, s.Errors, s.Rows, s.Truncated, tc.calls, tc.errors)
		}
		if want := float64(tc.calls) / 30000; s.Ops != 30000 || s.PerOp < want-0.001 || s.PerOp > want+0.001 {
			t.Errorf("%s: per op %v, want %v", tc.file, s.PerOp, want)
		}
		if len(r.Notes) == 0 || !strings.Contains(r.Notes[0], "truncated") {
			t.Errorf("%s: notes %q should say the table is truncated", tc.file, r.Notes)
		}
		if names := s.SyscallNames(); names[0] != "futex" || names[1] != "read" {
			t.Errorf("%s: most called %q", tc.file, names[:2])
		}
	}
}

// The JSON contract of shared/checks/README.md and the package doc.
func TestSavedJSONShape(t *testing.T) {
	r, err := ImportStrace(ImportOptions{File: seedPath("seed000-batch1.txt"), Name: "seed000-0"})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "new", "run")
	if err := Save(dir, r, false); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		SchemaVersion int    `json:"schema_version"`
		Name          string `json:"name"`
		Source        string `json:"source"`
		ImportedFrom  string `json:"imported_from"`
		Syscalls      struct {
			Total   int64                     `json:"total"`
			Errors  int64                     `json:"errors"`
			Seconds float64                   `json:"seconds"`
			ByName  map[string]map[string]any `json:"by_name"`
		} `json:"syscalls"`
		Results json.RawMessage `json:"results"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	if d.SchemaVersion != 1 || d.Name != "seed000-0" || d.Source != "strace -c import" || d.ImportedFrom != seedPath("seed000-batch1.txt") {
		t.Errorf("header %+v", d)
	}
	if d.Syscalls.Total != 2727877 || d.Syscalls.Errors != 257953 || d.Syscalls.Seconds != 7064.807148 {
		t.Errorf("syscalls totals %+v", d.Syscalls)
	}
	futex := d.Syscalls.ByName["futex"]
	for _, k := range []string{"calls", "errors", "seconds", "usecs_per_call"} {
		if _, ok := futex[k]; !ok {
			t.Errorf("by_name.futex lacks %q: %v", k, futex)
		}
	}
	if futex["calls"] != float64(1094305) || futex["usecs_per_call"] != float64(6243) {
		t.Errorf("by_name.futex %v", futex)
	}
	if string(d.Results) != "[]" {
		t.Errorf("results %s, want []", d.Results)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("run directory holds %d entries, want results.json only", len(entries))
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	r := NewRun("bench-a", SourceBench)
	res := bench.Result{Scenario: "queue-dirs", Ops: 10, Seconds: 1, OpsPerS: 10}
	res.SetParam("senders", 10)
	r.Results = append(r.Results, res)
	if err := Save(dir, r, false); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{dir, filepath.Join(dir, ResultsFile)} {
		got, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if got.Name != "bench-a" || got.Syscalls != nil || len(got.Results) != 1 || got.Results[0].Scenario != "queue-dirs" ||
			got.Results[0].Params["senders"] != float64(10) || !got.CreatedAt.Equal(r.CreatedAt) {
			t.Errorf("loaded %+v", got)
		}
	}
	// No overwrite without replace; with it, the new run wins.
	r2 := NewRun("bench-b", SourceBench)
	if err := Save(dir, r2, false); !errors.Is(err, ErrRunExists) {
		t.Fatalf("second Save: %v, want ErrRunExists", err)
	}
	if got, _ := Load(dir); got.Name != "bench-a" {
		t.Errorf("refused Save changed the run to %q", got.Name)
	}
	if err := Save(dir, r2, true); err != nil {
		t.Fatal(err)
	}
	if got, _ := Load(dir); got.Name != "bench-b" {
		t.Errorf("replaced run is %q", got.Name)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
}

func TestImportErrors(t *testing.T) {
	if _, err := ImportStrace(ImportOptions{File: filepath.Join(t.TempDir(), "absent.txt")}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	empty := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(empty, []byte("no table here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ImportStrace(ImportOptions{File: empty})
	if !errors.Is(err, syscallprof.ErrNoTable) || !strings.Contains(err.Error(), empty) {
		t.Errorf("file without a table: %v", err)
	}
	if _, err := ImportStrace(ImportOptions{File: seedPath("seed000-batch1.txt"), Ops: -1}); err == nil {
		t.Error("negative ops accepted")
	}
}

func TestLoadRejectsInvalidRuns(t *testing.T) {
	good, err := ImportStrace(ImportOptions{File: seedPath("seed000-batch10.txt")})
	if err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(r *Run){
		"version":       func(r *Run) { r.SchemaVersion = 2 },
		"no name":       func(r *Run) { r.Name = " " },
		"no source":     func(r *Run) { r.Source = "" },
		"rows mismatch": func(r *Run) { r.Syscalls.Rows.Calls++ },
		"total < rows":  func(r *Run) { r.Syscalls.Total = 1 },
		"negative":      func(r *Run) { r.Syscalls.ByName["x"] = SyscallStat{Calls: -1} },
		"no scenario":   func(r *Run) { r.Results = []bench.Result{{Ops: 1}} },
	} {
		r := good
		s := *good.Syscalls
		s.ByName = make(map[string]SyscallStat)
		for k, v := range good.Syscalls.ByName {
			s.ByName[k] = v
		}
		r.Syscalls = &s
		mutate(&r)
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(t.TempDir(), ResultsFile)
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(file); err == nil {
			t.Errorf("%s: Load accepted an invalid run", name)
		}
		if err := Save(t.TempDir(), r, false); err == nil {
			t.Errorf("%s: Save accepted an invalid run", name)
		}
	}
	if _, err := Load(t.TempDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("empty directory: %v", err)
	}
}
