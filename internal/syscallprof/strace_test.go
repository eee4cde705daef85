package syscallprof

import (
	"bytes"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func parseString(t *testing.T, s string) Profile {
	t.Helper()
	p, err := Parse(strings.NewReader(s))
	if err != nil {
		t.Fatalf("Parse: %v\ninput:\n%s", err, s)
	}
	checkInvariants(t, p)
	return p
}

// checkInvariants asserts what the package doc promises of every profile.
func checkInvariants(t *testing.T, p Profile) {
	t.Helper()
	var rows Counts
	names := make(map[string]bool)
	for _, s := range p.Syscalls {
		if s.Name == "" || names[s.Name] {
			t.Fatalf("empty or repeated syscall name %q", s.Name)
		}
		names[s.Name] = true
		if s.Calls < 0 || s.Errors < 0 || s.Errors > s.Calls || !finiteNonNeg(s.Seconds, s.UsecsPerCall, s.PercentTime, s.ShortestSeconds, s.LongestSeconds) {
			t.Fatalf("row out of range: %+v", s)
		}
		rows.Calls += s.Calls
		rows.Errors += s.Errors
		rows.Seconds += s.Seconds
	}
	if rows.Calls != p.Rows.Calls || rows.Errors != p.Rows.Errors || math.Abs(rows.Seconds-p.Rows.Seconds) > 1e-6*rows.Seconds+1e-9 {
		t.Fatalf("Rows %+v is not the sum of the rows %+v", p.Rows, rows)
	}
	if !p.HasTotalLine && p.Total != p.Rows {
		t.Fatalf("no total line but Total %+v != Rows %+v", p.Total, p.Rows)
	}
	if p.Total.Calls < 0 || p.Total.Errors < 0 || !finiteNonNeg(p.Total.Seconds) {
		t.Fatalf("total out of range: %+v", p.Total)
	}
	if p.Tables < 1 || p.Tables > MaxTables || len(p.Syscalls) > MaxSyscallsPerTable*p.Tables {
		t.Fatalf("tables %d rows %d out of bounds", p.Tables, len(p.Syscalls))
	}
	if p.Tool != ToolStraceC || !p.Has(ColCalls) || !p.Has(ColSyscall) {
		t.Fatalf("tool %q columns %q", p.Tool, p.Columns)
	}
}

func finiteNonNeg(vs ...float64) bool {
	for _, v := range vs {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return false
		}
	}
	return true
}

// The three tables of seed 000 (strace -f -c of an Ozone datanode, cut "from
// the bottom up" by the author): the printed totals are authoritative.
func TestSeed000Tables(t *testing.T) {
	for _, tc := range []struct {
		file           string
		calls, errors  int64
		seconds        float64
		rows           int
		futex, futexEr int64
	}{
		{"seed000-batch1.txt", 2727877, 257953, 7064.807148, 39, 1094305, 131769},
		{"seed000-batch10.txt", 1691167, 212785, 5743.529995, 40, 516060, 86596},
		{"seed000-batch1-repeat.txt", 2738788, 260830, 7365.703297, 39, 1101987, 134644},
	} {
		t.Run(tc.file, func(t *testing.T) {
			p, err := ParseFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			checkInvariants(t, p)
			if p.Total.Calls != tc.calls || p.Total.Errors != tc.errors || p.Total.Seconds != tc.seconds {
				t.Errorf("total %+v, want calls %d errors %d seconds %v", p.Total, tc.calls, tc.errors, tc.seconds)
			}
			if len(p.Syscalls) != tc.rows || !p.HasTotalLine || !p.TruncationMarker || !p.Truncated() || p.RowsMatchTotal() {
				t.Errorf("rows %d (want %d), total line %v, marker %v, truncated %v", len(p.Syscalls), tc.rows, p.HasTotalLine, p.TruncationMarker, p.Truncated())
			}
			if m := p.Missing(); m.Calls <= 0 || m.Calls >= 1000*int64(1+len(p.Syscalls)) || m.Errors < 0 || m.Calls != p.Total.Calls-p.Rows.Calls {
				t.Errorf("missing %+v: the cut rows have fewer than 1000 calls each", m)
			}
			futex, ok := p.Lookup("futex")
			if !ok || futex.Calls != tc.futex || futex.Errors != tc.futexEr || p.Syscalls[0].Name != "futex" {
				t.Errorf("futex row %+v (first row %q)", futex, p.Syscalls[0].Name)
			}
			if ep, _ := p.Lookup("epoll_wait"); ep.Errors != 0 || ep.Calls == 0 {
				t.Errorf("epoll_wait (blank errors cell) parsed as %+v", ep)
			}
			want := []Column{ColPercentTime, ColSeconds, ColUsecsPerCall, ColCalls, ColErrors, ColSyscall}
			if !sameColumns(p.Columns, want) {
				t.Errorf("columns %q, want %q", p.Columns, want)
			}
		})
	}
	p, err := ParseFile(filepath.Join("testdata", "seed000-batch1.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := p.Lookup("wait4"); s != (Syscall{Name: "wait4", Calls: 60, Errors: 29, Seconds: 0.135423, UsecsPerCall: 2257, PercentTime: 0}) {
		t.Errorf("wait4 row %+v", s)
	}
	if s, _ := p.Lookup("rename"); s.Calls != 30011 || s.Errors != 1 || s.PercentTime != 0.02 {
		t.Errorf("rename row %+v", s)
	}
}

// Outputs of the strace on this machine (strace 6.1 when they were made;
// the commands are in testdata/README). Complete tables: rows add up.
func TestLocalStraceOutputs(t *testing.T) {
	for _, tc := range []struct {
		file          string
		calls, errors int64
		seconds       float64
		rows          int
	}{
		{"local-dd-f.txt", 146, 17, 0.005709, 22},  // strace -f -c, dd oflag=dsync
		{"local-ls-c.txt", 700, 377, 0.010974, 29}, // strace -c (no -f)
		{"local-sh-fw.txt", 381, 64, 0.015543, 37}, // strace -f -c -w (wall clock)
		{"local-sh-U.txt", 237, 39, 0.005681, 36},  // strace -f -c -U (all columns, reordered)
		{"local-true-C.txt", 117, 18, 0, 19},       // strace -C: the trace, then the table
		{"local-go-f.txt", 368, 42, 0.013362, 33},  // strace -f -c -S calls, multi-threaded
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("testdata", tc.file)
			p, err := ParseFile(path)
			if err != nil {
				t.Fatal(err)
			}
			checkInvariants(t, p)
			if p.Total.Calls != tc.calls || p.Total.Errors != tc.errors || p.Total.Seconds != tc.seconds || len(p.Syscalls) != tc.rows {
				t.Errorf("total %+v rows %d, want calls %d errors %d seconds %v rows %d", p.Total, len(p.Syscalls), tc.calls, tc.errors, tc.seconds, tc.rows)
			}
			if !p.RowsMatchTotal() || p.Truncated() {
				t.Errorf("complete table: rows %+v should add up to total %+v", p.Rows, p.Total)
			}
			// Independently of the parser: the last line ending in "total"
			// carries the calls in the column under "calls".
			if want := printedTotalCalls(t, path); p.Total.Calls != want {
				t.Errorf("parsed total %d, printed %d", p.Total.Calls, want)
			}
		})
	}
	p, err := ParseFile(filepath.Join("testdata", "local-sh-U.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Column{ColSyscall, ColCalls, ColErrors, ColSeconds, ColUsecsPerCall, ColShortest, ColLongest, ColPercentTime}
	if !sameColumns(p.Columns, want) {
		t.Errorf("-U columns %q, want %q", p.Columns, want)
	}
	w, ok := p.Lookup("wait4")
	if !ok || w.LongestSeconds == 0 || w.LongestSeconds < w.ShortestSeconds || w.PercentTime == 0 {
		t.Errorf("wait4 with -U columns: %+v", w)
	}
}

// printedTotalCalls finds the calls of the total line by the header's
// "calls" label position: a second, deliberately naive reading.
func printedTotalCalls(t *testing.T, path string) int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var header, total string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, "calls") && strings.Contains(l, "syscall") {
			header = l
		}
		if f := strings.Fields(l); len(f) > 0 && (f[len(f)-1] == "total" || f[0] == "total") {
			total = l
		}
	}
	end := strings.Index(header, "calls") + len("calls")
	if end < len("calls") || end > len(total) {
		t.Fatalf("%s: no header or total line", path)
	}
	start := strings.LastIndex(total[:end], " ") + 1
	n, err := strconv.ParseInt(total[start:end], 10, 64)
	if err != nil {
		t.Fatalf("%s: total line %q: %v", path, total, err)
	}
	return n
}

// TestLiveStrace runs the strace of this machine, when it has one that may
// trace (it must, under SPINDLE_REQUIRE_STRACE=1), on a shell command and
// checks that the parsed total is the printed one.
func TestLiveStrace(t *testing.T) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		NoStrace(t, "no strace on PATH")
	}
	for _, args := range [][]string{{"-f", "-c"}, {"-c"}, {"-f", "-c", "-w"}} {
		out := filepath.Join(t.TempDir(), "summary.txt")
		cmd := exec.Command(strace, append(append(args, "-o", out), "/bin/sh", "-c", "ls / /nonexistent >/dev/null 2>&1; true")...)
		if msg, err := cmd.CombinedOutput(); err != nil {
			NoStrace(t, "strace cannot trace here: %v: %s", err, msg)
		}
		p, err := ParseFile(out)
		if err != nil {
			t.Fatalf("strace %v: %v", args, err)
		}
		checkInvariants(t, p)
		if want := printedTotalCalls(t, out); p.Total.Calls != want || !p.RowsMatchTotal() || p.Total.Calls == 0 {
			t.Errorf("strace %v: total %+v rows %+v, printed calls %d", args, p.Total, p.Rows, want)
		}
		if s, ok := p.Lookup("execve"); !ok || s.Calls < 1 {
			t.Errorf("strace %v: no execve row", args)
		}
	}
}

// Older strace prints no usecs/call on the total line; errors are blank
// when zero, including on the total line.
func TestOldLayoutBlankCells(t *testing.T) {
	p := parseString(t, `% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 60.00    0.000060          20         3           read
 40.00    0.000040          10         4           write
------ ----------- ----------- --------- --------- ----------------
100.00    0.000100                     7           total
`)
	if p.Total != (Counts{Calls: 7, Errors: 0, Seconds: 0.0001}) || len(p.Syscalls) != 2 || !p.RowsMatchTotal() || p.Truncated() {
		t.Fatalf("profile %+v", p)
	}
	if r := p.Syscalls[1]; r != (Syscall{Name: "write", Calls: 4, Seconds: 0.00004, UsecsPerCall: 10, PercentTime: 40}) {
		t.Errorf("write row %+v", r)
	}
	// Blank usecs/call on the total line, with errors: alignment decides.
	p = parseString(t, `% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
100.00    0.000100          14         7         2 open
------ ----------- ----------- --------- --------- ----------------
100.00    0.000100                     7         2 total
`)
	if p.Total.Calls != 7 || p.Total.Errors != 2 {
		t.Errorf("total %+v, want 7 calls, 2 errors", p.Total)
	}
}

func TestNoiseAroundTable(t *testing.T) {
	in := "strace: Process 4242 attached\nhello from the program\n% time is what we measure\n" +
		"calls syscall but no separator\n\n" +
		`% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
100.00    0.000010          10         1         1 openat
strace: Process 4243 detached
------ ----------- ----------- --------- --------- ----------------
100.00    0.000010          10         1         1 total
+++ exited with 0 +++
trailing words
`
	p := parseString(t, in)
	if p.Total.Calls != 1 || p.Total.Errors != 1 || len(p.Syscalls) != 1 || p.Tables != 1 {
		t.Errorf("profile %+v", p)
	}
	crlf := parseString(t, strings.ReplaceAll(in, "\n", "\r\n"))
	if crlf.Total != p.Total || len(crlf.Syscalls) != 1 {
		t.Errorf("CRLF input parsed as %+v", crlf)
	}
}

// strace prints one table per personality; Parse merges them.
func TestPersonalityTablesMerge(t *testing.T) {
	table := func(n int, sec string) string {
		return `% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 50.00    ` + sec + `           1        ` + strconv.Itoa(n) + `           read
 50.00    ` + sec + `           1        ` + strconv.Itoa(n) + `         1 close
------ ----------- ----------- --------- --------- ----------------
100.00    0.000020           1        ` + strconv.Itoa(2*n) + `         1 total
`
	}
	in := table(5, "0.000010") + "System call usage summary for 32 bit mode:\n" + table(3, "0.000010")
	tables, err := ParseTables(strings.NewReader(in))
	if err != nil || len(tables) != 2 {
		t.Fatalf("ParseTables: %d tables, %v", len(tables), err)
	}
	p := parseString(t, in)
	if p.Tables != 2 || p.Total != (Counts{Calls: 16, Errors: 2, Seconds: 0.00004}) || len(p.Syscalls) != 2 {
		t.Fatalf("merged %+v", p)
	}
	if r, _ := p.Lookup("read"); r.Calls != 8 || math.Abs(r.PercentTime-50) > 1e-9 || math.Abs(r.UsecsPerCall-2.5) > 1e-9 {
		t.Errorf("merged read row %+v", r)
	}
}

func TestTableWithoutTotalLine(t *testing.T) {
	p := parseString(t, `% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 60.00    0.000060          20         3           read
`)
	if p.HasTotalLine || p.Total != p.Rows || p.Total.Calls != 3 {
		t.Errorf("profile %+v", p)
	}
}

func TestDerivedUsecsPerCall(t *testing.T) {
	p := parseString(t, `syscall            calls     seconds
---------------- --------- -----------
read                     4    0.000010
---------------- --------- -----------
total                    4    0.000010
`)
	if r, _ := p.Lookup("read"); math.Abs(r.UsecsPerCall-2.5) > 1e-9 || r.Calls != 4 {
		t.Errorf("read %+v: usecs/call should be derived", r)
	}
}

func TestErrors(t *testing.T) {
	for name, in := range map[string]string{
		"empty":        "",
		"prose":        "nothing to see here\njust words\n",
		"header only":  "% time     seconds  usecs/call     calls    errors syscall\n",
		"no separator": "% time     seconds  usecs/call     calls    errors syscall\n100.00 0.1 1 1 1 total\n",
	} {
		if _, err := Parse(strings.NewReader(in)); !errors.Is(err, ErrNoTable) {
			t.Errorf("%s: err %v, want ErrNoTable", name, err)
		}
	}
	head := "% time     seconds  usecs/call     calls    errors syscall\n------ ----------- ----------- --------- --------- ----------------\n"
	for name, body := range map[string]string{
		"garbage row":  " 10.00 0.1 1 1 1 read extra\n",
		"words":        "this is not a row\n",
		"negative":     " 10.00 -0.1 1 1 1 read\n",
		"errors>calls": " 10.00    0.000010           1         1         5 read\n",
		"duplicate":    " 10.00    0.000010           1         1           read\n 10.00    0.000010           1         1           read\n",
		"huge count":   " 10.00    0.000010           1 99999999999999999999    read\n",
		"no calls":     " 10.00    0.000010           read\n",
		"row after":    "------ ---\n 10.00    0.000010           1         1           read\n",
	} {
		_, err := Parse(strings.NewReader(head + body))
		want := "line 3"
		if name == "duplicate" || name == "row after" {
			want = "line 4"
		}
		if err == nil || errors.Is(err, ErrNoTable) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want an error at %s", name, err, want)
		}
	}
	if _, err := ParseFile(filepath.Join(t.TempDir(), "missing.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestLongLines(t *testing.T) {
	noise := bytes.Repeat([]byte("x"), 3*MaxLineBytes)
	data, err := os.ReadFile(filepath.Join("testdata", "local-dd-f.txt"))
	if err != nil {
		t.Fatal(err)
	}
	p := parseString(t, string(noise)+"\n"+string(data))
	if p.Total.Calls != 146 {
		t.Errorf("after a long noise line: total %+v", p.Total)
	}
	lines := strings.SplitN(string(data), "\n", 4)
	bad := lines[0] + "\n" + lines[1] + "\n" + string(noise) + "\n" + lines[3]
	if _, err := Parse(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("long line inside a table: %v", err)
	}
}

// FuzzParse: no input makes the parser panic, and what it accepts keeps the
// documented invariants.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.txt"))
	for _, file := range files {
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("% time seconds usecs/call calls errors syscall\n-- -- -- -- -- --\n1 1 1 1 1 x\n-- --\n1 1 1 total\n"))
	f.Add([]byte("syscall calls\n--- ---\nread 1\n...\n--- ---\ntotal 9\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(bytes.NewReader(data))
		if err != nil {
			return
		}
		checkInvariants(t, p)
		_ = p.Truncated()
		_ = p.Missing()
	})
}
