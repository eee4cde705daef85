package syscallprof

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
)

// Limits of the parser.
const (
	// MaxLineBytes bounds one line; longer lines are noise outside a table
	// and an error inside one.
	MaxLineBytes = 64 << 10
	// MaxTables bounds the tables of one input (strace prints one per
	// personality: at most three on any architecture).
	MaxTables = 16
	// MaxSyscallsPerTable bounds the rows of one table (Linux has fewer
	// than 500 system calls per personality).
	MaxSyscallsPerTable = 4096
	// MaxColumns bounds the columns of a header (strace has eight).
	MaxColumns = 16
	// MaxCount bounds one printed count (calls or errors); larger values are
	// rejected, so sums stay exact in int64 and in float64.
	MaxCount = int64(1) << 52
	// MaxSeconds bounds one printed time (about 31 years).
	MaxSeconds = 1e9
	// maxPercent bounds a printed share of time (strace prints at most
	// 100.00; merged or hand-edited tables may round above it).
	maxPercent = 1000
)

// ToolStraceC is Profile.Tool for strace summaries.
const ToolStraceC = "strace -c"

// ErrNoTable is returned (wrapped) when the input holds no strace -c
// summary table.
var ErrNoTable = errors.New("no strace -c summary table")

// Column is a column of a summary table, named by its printed header.
type Column string

// The columns strace prints (-U selects and orders them).
const (
	ColPercentTime  Column = "% time"     // share of the total time, %6.2f
	ColSeconds      Column = "seconds"    // total time in the call, %11.6f
	ColUsecsPerCall Column = "usecs/call" // average, integer microseconds
	ColShortest     Column = "shortest"   // shortest call, seconds
	ColLongest      Column = "longest"    // longest call, seconds
	ColCalls        Column = "calls"
	ColErrors       Column = "errors" // blank when zero
	ColSyscall      Column = "syscall"
)

var knownColumns = map[Column]bool{
	ColPercentTime: true, ColSeconds: true, ColUsecsPerCall: true, ColShortest: true,
	ColLongest: true, ColCalls: true, ColErrors: true, ColSyscall: true,
}

// Counts are the totals of a table or of a set of rows.
type Counts struct {
	Calls   int64   `json:"calls"`
	Errors  int64   `json:"errors"`
	Seconds float64 `json:"seconds"`
}

// Syscall is one row of a table. Fields whose column the table lacks are
// zero, except UsecsPerCall, which is derived from Seconds and Calls when
// the table has seconds but no usecs/call column.
type Syscall struct {
	Name            string  `json:"name"`
	Calls           int64   `json:"calls"`
	Errors          int64   `json:"errors"`
	Seconds         float64 `json:"seconds"`
	UsecsPerCall    float64 `json:"usecs_per_call"`
	PercentTime     float64 `json:"percent_time"`
	ShortestSeconds float64 `json:"shortest_seconds,omitempty"`
	LongestSeconds  float64 `json:"longest_seconds,omitempty"`
}

// Profile is a parsed summary (one table, or the merge of several).
type Profile struct {
	// Tool is what produced the table: ToolStraceC.
	Tool string `json:"tool"`
	// Columns are the table's columns in printed order.
	Columns []Column `json:"columns"`
	// Total is the printed total line: authoritative even when rows are
	// missing. Without a total line it equals Rows.
	Total Counts `json:"total"`
	// Rows is the sum over Syscalls.
	Rows Counts `json:"rows"`
	// HasTotalLine is false when the table ended without a total line.
	HasTotalLine bool `json:"has_total_line"`
	// TruncationMarker is true when a line of dots stood for missing rows.
	TruncationMarker bool `json:"truncation_marker"`
	// Syscalls are the rows in printed order (merged by name across tables).
	Syscalls []Syscall `json:"syscalls"`
	// Tables is the number of tables merged into this profile.
	Tables int `json:"tables"`
}

// Has reports whether the table has column c.
func (p *Profile) Has(c Column) bool {
	for _, x := range p.Columns {
		if x == c {
			return true
		}
	}
	return false
}

// RowsMatchTotal reports whether the rows add up to the printed total
// (calls and errors exactly, seconds within the rounding of the printed
// rows: half a microsecond per row).
func (p *Profile) RowsMatchTotal() bool {
	tol := 1e-6*float64(len(p.Syscalls)+1) + 1e-9*p.Total.Seconds
	return p.Rows.Calls == p.Total.Calls && p.Rows.Errors == p.Total.Errors &&
		math.Abs(p.Rows.Seconds-p.Total.Seconds) <= tol
}

// Truncated reports whether rows are known to be missing: a truncation
// marker was printed or the rows do not add up to the total.
func (p *Profile) Truncated() bool { return p.TruncationMarker || !p.RowsMatchTotal() }

// Missing returns what the printed total has beyond the rows present.
func (p *Profile) Missing() Counts {
	return Counts{
		Calls:   p.Total.Calls - p.Rows.Calls,
		Errors:  p.Total.Errors - p.Rows.Errors,
		Seconds: math.Max(0, p.Total.Seconds-p.Rows.Seconds),
	}
}

// Lookup returns the row of syscall name.
func (p *Profile) Lookup(name string) (Syscall, bool) {
	for _, s := range p.Syscalls {
		if s.Name == name {
			return s, true
		}
	}
	return Syscall{}, false
}

// ParseFile parses the strace summary in the file at path (see Parse).
func ParseFile(path string) (Profile, error) {
	f, err := os.Open(path)
	if err != nil {
		return Profile{}, fmt.Errorf("syscallprof: %w", err)
	}
	defer func() { _ = f.Close() }() // read-only
	p, err := Parse(f)
	if err != nil {
		return Profile{}, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Parse reads an strace -c summary from r, skipping anything around it, and
// returns its profile; several tables (one per personality) are merged.
// It returns an error wrapping ErrNoTable when r holds no table.
func Parse(r io.Reader) (Profile, error) {
	tables, err := ParseTables(r)
	if err != nil {
		return Profile{}, err
	}
	return Merge(tables)
}

// ParseTables returns every summary table in r, in order.
func ParseTables(r io.Reader) ([]Profile, error) {
	p := parser{lines: newLineReader(r)}
	return p.run()
}

// Merge combines tables of one run (one per personality): counts add up,
// rows of the same syscall are merged, average and share are recomputed.
// All tables must have the same columns.
func Merge(tables []Profile) (Profile, error) {
	switch len(tables) {
	case 0:
		return Profile{}, fmt.Errorf("syscallprof: %w", ErrNoTable)
	case 1:
		return tables[0], nil
	}
	out := Profile{Tool: tables[0].Tool, Columns: tables[0].Columns, HasTotalLine: true}
	index := make(map[string]int)
	for ti, t := range tables {
		if !sameColumns(t.Columns, out.Columns) {
			return Profile{}, fmt.Errorf("syscallprof: table %d has columns %q, table 1 has %q: not one run", ti+1, t.Columns, out.Columns)
		}
		var err error
		if out.Total, err = addCounts(out.Total, t.Total); err != nil {
			return Profile{}, fmt.Errorf("syscallprof: merging table %d: %w", ti+1, err)
		}
		if out.Rows, err = addCounts(out.Rows, t.Rows); err != nil {
			return Profile{}, fmt.Errorf("syscallprof: merging table %d: %w", ti+1, err)
		}
		out.HasTotalLine = out.HasTotalLine && t.HasTotalLine
		out.TruncationMarker = out.TruncationMarker || t.TruncationMarker
		out.Tables += t.Tables
		for _, s := range t.Syscalls {
			i, ok := index[s.Name]
			if !ok {
				index[s.Name] = len(out.Syscalls)
				out.Syscalls = append(out.Syscalls, s)
				continue
			}
			m := &out.Syscalls[i]
			if s.ShortestSeconds < m.ShortestSeconds {
				m.ShortestSeconds = s.ShortestSeconds
			}
			m.LongestSeconds = math.Max(m.LongestSeconds, s.LongestSeconds)
			m.Calls += s.Calls // bounded: each table's rows sum without overflow, and so do the totals above
			m.Errors += s.Errors
			m.Seconds += s.Seconds
		}
	}
	if out.Tables > MaxTables {
		return Profile{}, fmt.Errorf("syscallprof: %d tables, at most %d", out.Tables, MaxTables)
	}
	hasSeconds := out.Has(ColSeconds)
	for i := range out.Syscalls {
		s := &out.Syscalls[i]
		if hasSeconds && s.Calls > 0 {
			s.UsecsPerCall = s.Seconds * 1e6 / float64(s.Calls)
		}
		if hasSeconds && out.Total.Seconds > 0 {
			s.PercentTime = 100 * s.Seconds / out.Total.Seconds
		}
	}
	return out, nil
}

func sameColumns(a, b []Column) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// addCounts adds b to a, refusing to overflow.
func addCounts(a, b Counts) (Counts, error) {
	if a.Calls > math.MaxInt64-b.Calls || a.Errors > math.MaxInt64-b.Errors {
		return a, errors.New("counts overflow int64")
	}
	return Counts{Calls: a.Calls + b.Calls, Errors: a.Errors + b.Errors, Seconds: a.Seconds + b.Seconds}, nil
}

// lineReader yields lines without their terminator, flagging (and cutting)
// those longer than MaxLineBytes.
type lineReader struct {
	r    *bufio.Reader
	n    int // number of the last line returned, from 1
	err  error
	line string
	long bool
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 4096)}
}

// next advances to the next line; false at the end of input or on a read
// error (then err is set).
func (l *lineReader) next() bool {
	if l.err != nil {
		return false
	}
	var b []byte
	long := false
	// Bounded by the input: every iteration consumes at least one byte or
	// ends the line.
	for {
		chunk, err := l.r.ReadSlice('\n')
		if len(b)+len(chunk) <= MaxLineBytes {
			b = append(b, chunk...)
		} else {
			long = true
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				l.err = err
				return false
			}
			if len(b) == 0 && !long {
				l.err = io.EOF
				return false
			}
			l.err = io.EOF // the last line had no newline: return it, then stop
		}
		break
	}
	l.n++
	l.line = strings.TrimRight(string(b), "\r\n")
	l.long = long
	return true
}

// span is a column's byte range [start, end) in the lines of a table.
type span struct{ start, end int }

// table is the layout of the table being read.
type table struct {
	cols  []Column
	spans []span
	name  int // index of the syscall column
}

type parser struct {
	lines  *lineReader
	tables []Profile
	// pending is a header line waiting for its separator.
	pending     string
	pendingLine int
	// nearMiss explains the last header-like line that did not start a
	// table, for the error when none is found.
	nearMiss string
}

func (p *parser) run() ([]Profile, error) {
	// Bounded by the input: each iteration consumes a line.
	for p.lines.next() {
		line := p.lines.line
		if p.lines.long {
			p.pending = ""
			continue
		}
		if p.pending != "" {
			header, headerLine := p.pending, p.pendingLine
			p.pending = ""
			if isBlank(line) {
				p.pending, p.pendingLine = header, headerLine // tolerate a blank line in between
				continue
			}
			if isSeparator(line) {
				t, err := newTable(header, line)
				if err != nil {
					p.nearMiss = fmt.Sprintf("line %d: %v", headerLine, err)
				} else {
					prof, err := p.readTable(t)
					if err != nil {
						return nil, fmt.Errorf("syscallprof: table at line %d: %w", headerLine, err)
					}
					if len(p.tables) == MaxTables {
						return nil, fmt.Errorf("syscallprof: more than %d tables", MaxTables)
					}
					p.tables = append(p.tables, prof)
					continue
				}
			}
		}
		if looksLikeHeader(line) {
			p.pending, p.pendingLine = line, p.lines.n
		}
	}
	if p.lines.err != nil && !errors.Is(p.lines.err, io.EOF) {
		return nil, fmt.Errorf("syscallprof: read line %d: %w", p.lines.n+1, p.lines.err)
	}
	if len(p.tables) == 0 {
		hint := `want a header such as "% time     seconds  usecs/call     calls    errors syscall" followed by a dashed separator line`
		if p.nearMiss != "" {
			hint = p.nearMiss
		}
		return nil, fmt.Errorf("syscallprof: %w (%s)", ErrNoTable, hint)
	}
	return p.tables, nil
}

// readTable reads the rows after the separator, up to and including the
// total line (or the end of the table).
func (p *parser) readTable(t table) (Profile, error) {
	prof := Profile{Tool: ToolStraceC, Columns: t.cols, Tables: 1}
	seen := make(map[string]bool)
	afterSeparator := false
	// Bounded by the input: each iteration consumes a line.
	for p.lines.next() {
		line := p.lines.line
		n := p.lines.n
		if p.lines.long {
			return prof, fmt.Errorf("line %d: longer than %d bytes", n, MaxLineBytes)
		}
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "":
			continue
		case isDots(trimmed):
			prof.TruncationMarker = true
			continue
		case isSeparator(line):
			if afterSeparator {
				return prof, fmt.Errorf("line %d: two separators in a row, no total line", n)
			}
			afterSeparator = true
			continue
		case strings.HasPrefix(trimmed, "strace: "):
			continue // strace's own messages ("Process 12 detached")
		}
		row, err := t.parseRow(line)
		if err != nil {
			return prof, fmt.Errorf("line %d: %w", n, err)
		}
		if row.Name == "total" {
			prof.Total = Counts{Calls: row.Calls, Errors: row.Errors, Seconds: row.Seconds}
			prof.HasTotalLine = true
			return finish(prof)
		}
		if afterSeparator {
			return prof, fmt.Errorf("line %d: row %q after the closing separator, want the total line", n, row.Name)
		}
		if seen[row.Name] {
			return prof, fmt.Errorf("line %d: syscall %q listed twice", n, row.Name)
		}
		if len(prof.Syscalls) == MaxSyscallsPerTable {
			return prof, fmt.Errorf("line %d: more than %d rows", n, MaxSyscallsPerTable)
		}
		seen[row.Name] = true
		prof.Syscalls = append(prof.Syscalls, row)
		var aerr error
		if prof.Rows, aerr = addCounts(prof.Rows, Counts{Calls: row.Calls, Errors: row.Errors, Seconds: row.Seconds}); aerr != nil {
			return prof, fmt.Errorf("line %d: %w", n, aerr)
		}
	}
	if p.lines.err != nil && !errors.Is(p.lines.err, io.EOF) {
		return prof, fmt.Errorf("read line %d: %w", p.lines.n+1, p.lines.err)
	}
	// The input ended inside the table: no total line.
	prof.Total = prof.Rows
	return finish(prof)
}

func finish(prof Profile) (Profile, error) {
	if !prof.Has(ColSeconds) || prof.Has(ColUsecsPerCall) {
		return prof, nil
	}
	for i := range prof.Syscalls {
		if s := &prof.Syscalls[i]; s.Calls > 0 {
			s.UsecsPerCall = s.Seconds * 1e6 / float64(s.Calls)
		}
	}
	return prof, nil
}

// headerLabels splits a header line into column labels ("% time" is one).
func headerLabels(line string) []Column {
	f := strings.Fields(line)
	cols := make([]Column, 0, len(f))
	for i := 0; i < len(f); i++ {
		if f[i] == "%" && i+1 < len(f) && f[i+1] == "time" {
			cols = append(cols, ColPercentTime)
			i++
			continue
		}
		cols = append(cols, Column(f[i]))
	}
	return cols
}

// looksLikeHeader: a line naming the calls and syscall columns, and nothing
// but plausible labels.
func looksLikeHeader(line string) bool {
	cols := headerLabels(line)
	if len(cols) < 2 || len(cols) > MaxColumns {
		return false
	}
	var calls, name bool
	for _, c := range cols {
		calls = calls || c == ColCalls
		name = name || c == ColSyscall
	}
	return calls && name
}

// newTable derives the layout from the header and the separator under it.
func newTable(header, sep string) (table, error) {
	cols := headerLabels(header)
	spans := separatorSpans(sep)
	if len(cols) != len(spans) {
		return table{}, fmt.Errorf("header has %d columns %q, the separator under it %d", len(cols), cols, len(spans))
	}
	t := table{cols: cols, spans: spans, name: -1}
	seen := make(map[Column]bool)
	for i, c := range cols {
		if seen[c] && knownColumns[c] {
			return table{}, fmt.Errorf("column %q twice in the header", c)
		}
		seen[c] = true
		if c == ColSyscall {
			t.name = i
		}
	}
	return t, nil
}

func separatorSpans(sep string) []span {
	var spans []span
	start := -1
	for i := 0; i <= len(sep); i++ {
		dash := i < len(sep) && sep[i] == '-'
		switch {
		case dash && start < 0:
			start = i
		case !dash && start >= 0:
			spans = append(spans, span{start, i})
			start = -1
		}
	}
	return spans
}

// isSeparator: dashes and blanks only, at least two dashes.
func isSeparator(line string) bool {
	dashes := 0
	for i := 0; i < len(line); i++ {
		switch line[i] {
		case '-':
			dashes++
		case ' ', '\t', '\r':
		default:
			return false
		}
	}
	return dashes >= 2
}

func isBlank(line string) bool { return strings.TrimSpace(line) == "" }

// isDots: "...", or the Unicode ellipsis, standing for rows left out.
func isDots(s string) bool {
	if s == "…" {
		return true
	}
	if len(s) < 2 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '.' {
			return false
		}
	}
	return true
}

// field is a token of a row and its byte range.
type field struct {
	text       string
	start, end int
}

func fields(line string) []field {
	var out []field
	start := -1
	for i := 0; i <= len(line); i++ {
		blank := i == len(line) || line[i] == ' ' || line[i] == '\t'
		switch {
		case !blank && start < 0:
			start = i
		case blank && start >= 0:
			out = append(out, field{line[start:i], start, i})
			start = -1
		}
	}
	return out
}

// isNumber: digits with at most one dot, as strace prints every number.
func isNumber(s string) bool {
	digits, dots := 0, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '.':
			dots++
		default:
			return false
		}
	}
	return digits > 0 && dots <= 1
}

// parseRow reads one row (or the total line) of the table.
func (t table) parseRow(line string) (Syscall, error) {
	fs := fields(line)
	if len(fs) == 0 {
		return Syscall{}, errors.New("empty row")
	}
	if len(fs) > len(t.cols) {
		return Syscall{}, fmt.Errorf("%d fields, the table has %d columns", len(fs), len(t.cols))
	}
	assign, err := t.assign(fs)
	if err != nil {
		return Syscall{}, err
	}
	var s Syscall
	var haveCalls bool
	for i, f := range fs {
		col := t.cols[assign[i]]
		var perr error
		switch col {
		case ColSyscall:
			s.Name = f.text
		case ColCalls:
			s.Calls, perr = parseCount(f.text)
			haveCalls = true
		case ColErrors:
			s.Errors, perr = parseCount(f.text)
		case ColSeconds:
			s.Seconds, perr = parseNumber(f.text, MaxSeconds)
		case ColUsecsPerCall:
			s.UsecsPerCall, perr = parseNumber(f.text, MaxSeconds*1e6)
		case ColPercentTime:
			s.PercentTime, perr = parseNumber(f.text, maxPercent)
		case ColShortest:
			s.ShortestSeconds, perr = parseNumber(f.text, MaxSeconds)
		case ColLongest:
			s.LongestSeconds, perr = parseNumber(f.text, MaxSeconds)
		}
		if perr != nil {
			return Syscall{}, fmt.Errorf("column %q: %w", col, perr)
		}
	}
	if s.Name == "" {
		return Syscall{}, errors.New("no syscall name")
	}
	if !haveCalls {
		return Syscall{}, fmt.Errorf("syscall %q: no calls count", s.Name)
	}
	if s.Errors > s.Calls {
		return Syscall{}, fmt.Errorf("syscall %q: %d errors out of %d calls", s.Name, s.Errors, s.Calls)
	}
	return s, nil
}

// assign maps each field to a column: in order when every cell is filled,
// otherwise by alignment with the separator (numbers are right-aligned, the
// syscall name left-aligned), choosing the order-preserving assignment with
// the least total misalignment. The name goes to the syscall column, numbers
// to the others; the calls cell is never blank.
func (t table) assign(fs []field) ([]int, error) {
	n, m := len(fs), len(t.cols)
	fits := func(i, j int) bool { return isNumber(fs[i].text) == (j != t.name) }
	cost := func(i, j int) int {
		if j == t.name {
			return abs(fs[i].start - t.spans[j].start)
		}
		return abs(fs[i].end - t.spans[j].end)
	}
	if n == m {
		out := make([]int, n)
		for i := range fs {
			if !fits(i, i) {
				return nil, fmt.Errorf("field %q in column %q", fs[i].text, t.cols[i])
			}
			out[i] = i
		}
		return out, nil
	}
	// best[i][j]: least cost of placing fields i.. into columns j..; columns
	// skipped are blank cells and must be allowed to be.
	const inf = math.MaxInt / 4
	blankOK := func(j int) bool { return j != t.name && t.cols[j] != ColCalls }
	best := make([][]int, n+1)
	for i := range best {
		best[i] = make([]int, m+1)
	}
	for j := m - 1; j >= 0; j-- { // no fields left: the rest must be blank
		best[n][j] = inf
		if blankOK(j) && (j == m-1 || best[n][j+1] < inf) {
			best[n][j] = 0
		}
	}
	for i := n - 1; i >= 0; i-- {
		best[i][m] = inf
		for j := m - 1; j >= 0; j-- {
			v := inf
			if fits(i, j) && best[i+1][j+1] < inf {
				v = cost(i, j) + best[i+1][j+1]
			}
			if blankOK(j) && best[i][j+1] < v {
				v = best[i][j+1]
			}
			best[i][j] = v
		}
	}
	if best[0][0] >= inf {
		return nil, fmt.Errorf("%d fields do not fit the %d columns %q", n, m, t.cols)
	}
	out := make([]int, 0, n)
	for i, j := 0, 0; i < n && j < m; j++ {
		if fits(i, j) && best[i+1][j+1] < inf && best[i][j] == cost(i, j)+best[i+1][j+1] {
			out = append(out, j)
			i++
		}
	}
	if len(out) != n {
		panic(fmt.Sprintf("syscallprof: alignment placed %d of %d fields", len(out), n))
	}
	return out, nil
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func parseCount(s string) (int64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("count %q: want a non-negative integer", s)
	}
	if v < 0 || v > MaxCount {
		return 0, fmt.Errorf("count %s out of range [0, %d]", s, MaxCount)
	}
	return v, nil
}

// parseNumber reads a non-negative decimal number no larger than limit.
func parseNumber(s string, limit float64) (float64, error) {
	if !isNumber(s) {
		return 0, fmt.Errorf("number %q: want digits and a decimal point", s)
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > limit {
		return 0, fmt.Errorf("number %q out of range [0, %g]", s, limit)
	}
	return v, nil
}
