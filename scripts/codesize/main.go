// Command codesize reports the size of the module's Go packages and fails
// when one grows past a bound.
//
// Run from the module root as `go run ./scripts/codesize` (make codesize).
// It walks every directory holding .go files (testdata, vendor, bin and
// dot-directories left out) and parses each file with go/parser, whatever
// its build constraints. For each package (a directory) it prints its
// lines of Go, non-test and test separately, and then the largest method
// sets: named types by the number of methods declared on them in the
// package's non-test files.
//
// Bounds: a package's non-test lines over -max-lines (3,000), a type with
// more than -max-methods (40). A package or type already over its bound is
// listed in the ratchet file (-baseline, scripts/codesize/baseline.txt)
// with its figure: it may shrink, not grow past that figure, and once it is
// back within the bound its line must be removed from the file. The
// command exits 1 when a bound is broken, a baseline figure is exceeded, a
// baseline line is no longer needed or names nothing, and 2 on a usage or
// parse error. -skip PREFIX (repeatable) leaves out a package path and
// everything under it, for code being moved; a baseline line under a
// skipped prefix is an error too.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Package is what codesize counts in one directory of Go files.
type Package struct {
	Path      string // slash-separated directory relative to the root; "." for the root
	Files     int    // .go files, test files included
	Lines     int    // lines of the non-test .go files
	TestLines int    // lines of the _test.go files
}

// Type is a named type and the number of methods its package's non-test
// files declare on it.
type Type struct {
	Pkg     string
	Name    string
	Methods int
}

// Key is how a type is named in the report and the baseline: pkg.Name.
func (t Type) Key() string { return t.Pkg + "." + t.Name }

// Count walks root and returns its packages, sorted by path, and the named
// types that have methods, largest method set first. Directories named
// testdata or vendor, bin at the root, dot- and underscore-directories are
// not walked; a package whose path is a skipped prefix or under one is
// left out.
func Count(root string, skip []string) ([]Package, []Type, error) {
	fset := token.NewFileSet()
	pkgs := map[string]*Package{}
	methods := map[string]*Type{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (name == "testdata" || name == "vendor" || rel == "bin" ||
				strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if skipped(rel, skip) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(d.Name(), ".go") || !d.Type().IsRegular() {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		p := pkgs[dir]
		if p == nil {
			p = &Package{Path: dir}
			pkgs[dir] = p
		}
		p.Files++
		lines := fset.File(f.Pos()).LineCount()
		if strings.HasSuffix(d.Name(), "_test.go") {
			p.TestLines += lines
			return nil
		}
		p.Lines += lines
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) != 1 {
				continue
			}
			name := receiverName(fn.Recv.List[0].Type)
			if name == "" {
				continue
			}
			k := dir + "." + name
			t := methods[k]
			if t == nil {
				t = &Type{Pkg: dir, Name: name}
				methods[k] = t
			}
			t.Methods++
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	var ps []Package
	for _, p := range pkgs {
		ps = append(ps, *p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].Path < ps[j].Path })
	var ts []Type
	for _, t := range methods {
		ts = append(ts, *t)
	}
	sort.Slice(ts, func(i, j int) bool {
		if ts[i].Methods != ts[j].Methods {
			return ts[i].Methods > ts[j].Methods
		}
		return ts[i].Key() < ts[j].Key()
	})
	return ps, ts, nil
}

// receiverName is the type name of a method's receiver: T for T, *T, T[P]
// and *T[P, Q].
func receiverName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// skipped reports whether the package path is prefix or under it, for one
// of the prefixes.
func skipped(path string, prefixes []string) bool {
	for _, p := range prefixes {
		p = strings.Trim(filepath.ToSlash(p), "/")
		if p != "" && (path == p || strings.HasPrefix(path, p+"/")) {
			return true
		}
	}
	return false
}

// Baseline is the ratchet file: package path or type key (pkg.Name) to
// the figure it may not grow past.
type Baseline map[string]int

// ReadBaseline parses the ratchet file: one "package PATH LINES" or
// "type PKG.NAME METHODS" a line; blank lines and lines starting with #
// are ignored. A missing file is an empty baseline.
func ReadBaseline(path string) (Baseline, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Baseline{}, nil
	}
	if err != nil {
		return nil, err
	}
	// Read-only: a Close error cannot lose anything once the scan succeeded.
	defer func() { _ = f.Close() }()
	return parseBaseline(f, path)
}

func parseBaseline(r io.Reader, name string) (Baseline, error) {
	b := Baseline{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 3 || (fields[0] != "package" && fields[0] != "type") {
			return nil, fmt.Errorf("%s:%d: want \"package PATH LINES\" or \"type PKG.NAME METHODS\", got %q", name, n, line)
		}
		figure, err := strconv.Atoi(fields[2])
		if err != nil || figure < 0 {
			return nil, fmt.Errorf("%s:%d: bad figure %q", name, n, fields[2])
		}
		if fields[0] == "type" && !strings.Contains(fields[1], ".") {
			return nil, fmt.Errorf("%s:%d: a type is named PKG.NAME, got %q", name, n, fields[1])
		}
		key := fields[0] + " " + fields[1]
		if _, dup := b[key]; dup {
			return nil, fmt.Errorf("%s:%d: %s listed twice", name, n, key)
		}
		b[key] = figure
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return b, nil
}

// Limits are the bounds Check enforces.
type Limits struct {
	MaxLines   int // a package's non-test lines
	MaxMethods int // methods declared on one named type
}

// Verdict is Check's word on one package or type: Problem set means the
// check fails; Note is advice that does not.
type Verdict struct {
	Problem string
	Note    string
}

// Check holds the counts against the limits and the baseline. It returns
// a verdict per baseline-style key ("package PATH", "type PKG.NAME") for
// each package or type over a bound or in the baseline, and the problems
// of baseline lines that name nothing counted (or something skipped).
func Check(pkgs []Package, types []Type, lim Limits, base Baseline, skip []string) (map[string]Verdict, []string) {
	verdicts := map[string]Verdict{}
	seen := map[string]bool{}
	judge := func(key string, figure, bound int, unit string) {
		allowed, listed := base[key]
		seen[key] = listed
		switch {
		case figure > bound && !listed:
			verdicts[key] = Verdict{Problem: fmt.Sprintf("%d %s, over the bound of %d (split it; it is not in the baseline)", figure, unit, bound)}
		case figure > bound && figure > allowed:
			verdicts[key] = Verdict{Problem: fmt.Sprintf("%d %s, grew past its baseline of %d (bound %d)", figure, unit, allowed, bound)}
		case figure > bound && figure < allowed:
			verdicts[key] = Verdict{Note: fmt.Sprintf("shrank from its baseline of %d to %d: lower the figure in the baseline", allowed, figure)}
		case figure > bound:
			verdicts[key] = Verdict{Note: fmt.Sprintf("at its baseline of %d (bound %d)", allowed, bound)}
		case listed:
			verdicts[key] = Verdict{Problem: fmt.Sprintf("%d %s, within the bound of %d now: remove its line from the baseline", figure, unit, bound)}
		}
	}
	for _, p := range pkgs {
		judge("package "+p.Path, p.Lines, lim.MaxLines, "lines")
	}
	for _, t := range types {
		judge("type "+t.Key(), t.Methods, lim.MaxMethods, "methods")
	}
	var stale []string
	for key := range base {
		if seen[key] {
			continue
		}
		path := strings.TrimPrefix(strings.TrimPrefix(key, "package "), "type ")
		if strings.HasPrefix(key, "type ") {
			path = path[:strings.LastIndex(path, ".")]
		}
		if skipped(path, skip) {
			stale = append(stale, fmt.Sprintf("baseline line %q is under a skipped prefix: remove it", key))
		} else {
			stale = append(stale, fmt.Sprintf("baseline line %q names no package or type with methods: remove it", key))
		}
	}
	sort.Strings(stale)
	return verdicts, stale
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdoutW, stderrW io.Writer) (code int) {
	// Both buffered: a write error is kept and returned by Flush, which
	// turns a clean exit into 2 (a report not written is no pass).
	stdout, stderr := bufio.NewWriter(stdoutW), bufio.NewWriter(stderrW)
	defer func() {
		if err := errors.Join(stdout.Flush(), stderr.Flush()); err != nil && code == 0 {
			code = 2
		}
	}()
	fl := flag.NewFlagSet("codesize", flag.ContinueOnError)
	fl.SetOutput(stderr)
	root := fl.String("root", ".", "module root to walk")
	basePath := fl.String("baseline", "scripts/codesize/baseline.txt", "ratchet file of packages and types already over a bound (relative to -root unless absolute)")
	maxLines := fl.Int("max-lines", 3000, "most non-test lines of Go a package may have")
	maxMethods := fl.Int("max-methods", 40, "most methods a named type may declare")
	top := fl.Int("top", 10, "how many of the largest method sets to print")
	var skip multiFlag
	fl.Var(&skip, "skip", "package path prefix to leave out, with everything under it (repeatable)")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "codesize: unexpected arguments %q\n", fl.Args())
		return 2
	}
	bp := *basePath
	if !filepath.IsAbs(bp) {
		bp = filepath.Join(*root, bp)
	}
	base, err := ReadBaseline(bp)
	if err != nil {
		fmt.Fprintf(stderr, "codesize: %v\n", err)
		return 2
	}
	pkgs, types, err := Count(*root, skip)
	if err != nil {
		fmt.Fprintf(stderr, "codesize: %v\n", err)
		return 2
	}
	lim := Limits{MaxLines: *maxLines, MaxMethods: *maxMethods}
	verdicts, stale := Check(pkgs, types, lim, base, skip)
	report(stdout, pkgs, types, *top, lim, verdicts, skip)

	var problems []string
	for key, v := range verdicts {
		if v.Problem != "" {
			problems = append(problems, key+": "+v.Problem)
		}
	}
	sort.Strings(problems)
	problems = append(problems, stale...)
	if len(problems) == 0 {
		fmt.Fprintf(stdout, "\ncodesize: ok (bounds: %d non-test lines a package, %d methods a type; baseline %s)\n", lim.MaxLines, lim.MaxMethods, *basePath)
		return 0
	}
	fmt.Fprintf(stdout, "\ncodesize: FAILED (bounds: %d non-test lines a package, %d methods a type; baseline %s):\n", lim.MaxLines, lim.MaxMethods, *basePath)
	for _, p := range problems {
		fmt.Fprintf(stdout, "  %s\n", p)
	}
	return 1
}

// report prints the two tables: packages with their lines, then the top
// largest method sets (and any type beyond them that is over its bound).
// Write errors are bw's, for its Flush.
func report(bw *bufio.Writer, pkgs []Package, types []Type, top int, lim Limits, verdicts map[string]Verdict, skip []string) {
	status := func(key string) string {
		v, ok := verdicts[key]
		switch {
		case !ok:
			return ""
		case v.Problem != "":
			return "FAIL: " + v.Problem
		default:
			return "baseline: " + v.Note
		}
	}
	width := len("package")
	for _, p := range pkgs {
		width = max(width, len(p.Path))
	}
	fmt.Fprintf(bw, "%-*s  %6s  %10s  %10s  %s\n", width, "package", "files", "lines", "test lines", "")
	var lines, testLines, files int
	for _, p := range pkgs {
		fmt.Fprintf(bw, "%-*s  %6d  %10d  %10d  %s\n", width, p.Path, p.Files, p.Lines, p.TestLines, status("package "+p.Path))
		lines += p.Lines
		testLines += p.TestLines
		files += p.Files
	}
	fmt.Fprintf(bw, "%-*s  %6d  %10d  %10d\n", width, "total", files, lines, testLines)
	if len(skip) > 0 {
		fmt.Fprintf(bw, "(skipped: %s)\n", strings.Join(skip, ", "))
	}

	var shown []Type
	for i, t := range types {
		if i < top || t.Methods > lim.MaxMethods {
			shown = append(shown, t)
		}
	}
	width = len("type")
	for _, t := range shown {
		width = max(width, len(t.Key()))
	}
	fmt.Fprintf(bw, "\nlargest method sets (top %d, and any over %d)\n", top, lim.MaxMethods)
	fmt.Fprintf(bw, "%-*s  %7s  %s\n", width, "type", "methods", "")
	for _, t := range shown {
		fmt.Fprintf(bw, "%-*s  %7d  %s\n", width, t.Key(), t.Methods, status("type "+t.Key()))
	}
}
