// Command portpick fails if a Go file of the module picks a port by
// listening and closing: a listener (from a call named Listen or
// ListenTCP) whose address is read and which is then only closed (or
// appended to a slice, to be closed later), never served on nor handed
// over. Its port is free again once it returns, and another process may
// take it before the server the port was picked for binds it (`make test`
// failed so: "bind: address already in use"). Bind port 0 in the process
// that serves and read back what it got (a ready file, Addr()), or hand
// the listener over (an in-process server's Listener, a child's
// --listen-fd). make lint runs it over the module.
//
// A pick that cannot be avoided yet is allowed by a comment beginning
// "portpick:allow" and saying why, on the Listen call's line or in the
// comment just above it.
//
// Usage: go run ./scripts/lint/portpick [DIR...] (default: .)
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	dirs := os.Args[1:]
	if len(dirs) == 0 {
		dirs = []string{"."}
	}
	var found []string
	for _, d := range dirs {
		f, err := scanTree(d)
		if err != nil {
			fmt.Fprintln(os.Stderr, "portpick:", err)
			os.Exit(2)
		}
		found = append(found, f...)
	}
	for _, f := range found {
		fmt.Println(f)
	}
	if len(found) > 0 {
		fmt.Printf("portpick: %d listener(s) only read for their port and closed: a port picked and then lost; bind port 0 where the server runs and read back its address, or hand the listener over\n", len(found))
		os.Exit(1)
	}
	fmt.Println("portpick: no port picked by listening and closing")
}

// scanTree checks the .go files under root, but testdata, vendor and
// hidden directories.
func scanTree(root string) ([]string, error) {
	var found []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (n == "testdata" || n == "vendor" || n == "bin" || strings.HasPrefix(n, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := scanFile(path, src)
		found = append(found, f...)
		return err
	})
	return found, err
}

// scanFile returns "FILE:LINE: VAR ..." for each port picked in src.
func scanFile(path string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution|parser.ParseComments)
	if err != nil {
		return nil, err
	}
	allowed := map[int]bool{} // lines a portpick:allow comment covers
	for _, cg := range file.Comments {
		for _, c := range cg.List {
			if strings.HasPrefix(strings.TrimSpace(strings.TrimPrefix(c.Text, "//")), "portpick:allow") {
				// The comment's lines and the line after it.
				for l := fset.Position(c.Pos()).Line; l <= fset.Position(cg.End()).Line+1; l++ {
					allowed[l] = true
				}
			}
		}
	}
	var found []string
	for _, decl := range file.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		for _, v := range listeners(fn.Body) {
			if pickedOnly(fn.Body, v) && !allowed[fset.Position(v.Pos()).Line] {
				found = append(found, fmt.Sprintf("%s: %s is only read for its address and closed", fset.Position(v.Pos()), v.Name))
			}
		}
	}
	return found, nil
}

// listeners are the variables assigned the result of a Listen call
// (the first result: `ln, err := net.Listen(...)`).
func listeners(body *ast.BlockStmt) []*ast.Ident {
	var out []*ast.Ident
	ast.Inspect(body, func(n ast.Node) bool {
		as, ok := n.(*ast.AssignStmt)
		if !ok || len(as.Rhs) != 1 || len(as.Lhs) == 0 {
			return true
		}
		call, ok := as.Rhs[0].(*ast.CallExpr)
		if !ok {
			return true
		}
		if name := funcName(call.Fun); name != "Listen" && name != "ListenTCP" {
			return true
		}
		if id, ok := as.Lhs[0].(*ast.Ident); ok && id.Name != "_" {
			out = append(out, id)
		}
		return true
	})
	return out
}

// pickedOnly says whether every other mention of v's name in body reads
// its address (v.Addr()), closes it (v.Close(), or v passed to a function
// whose name says close) or appends it to a slice, and one reads its
// address. A mention of the name by another variable of the same name
// counts as a use: the check errs on the side of silence.
func pickedOnly(body *ast.BlockStmt, v *ast.Ident) bool {
	addrRead, other := false, false
	var stack []ast.Node
	ast.Inspect(body, func(n ast.Node) bool {
		if n == nil {
			stack = stack[:len(stack)-1]
			return false
		}
		defer func() { stack = append(stack, n) }()
		id, ok := n.(*ast.Ident)
		if !ok || id == v || id.Name != v.Name || len(stack) == 0 {
			return true
		}
		switch p := stack[len(stack)-1].(type) {
		case *ast.SelectorExpr:
			if p.X != id {
				return true // a field or method of that name: not v
			}
			if len(stack) >= 2 {
				if call, ok := stack[len(stack)-2].(*ast.CallExpr); ok && call.Fun == p {
					switch p.Sel.Name {
					case "Addr":
						addrRead = true
						return true
					case "Close":
						return true
					}
				}
			}
		case *ast.CallExpr:
			name := funcName(p.Fun)
			if name == "append" || strings.Contains(strings.ToLower(name), "close") {
				return true
			}
		case *ast.AssignStmt:
			if isLHS(p, id) {
				return true // assigned again (ln, err = net.Listen(...)): a listener of its own, checked as such
			}
		case *ast.RangeStmt:
			if p.Key == id || p.Value == id {
				return true // for _, ln := range lns: a declaration
			}
		case *ast.KeyValueExpr:
			if p.Key == id {
				return true // a field name in a composite literal
			}
		}
		other = true
		return true
	})
	return addrRead && !other
}

// isLHS says whether id is assigned by as.
func isLHS(as *ast.AssignStmt, id *ast.Ident) bool {
	for _, l := range as.Lhs {
		if l == id {
			return true
		}
	}
	return false
}

// funcName is the name a call's function is called by (the selector's
// name for pkg.F and x.M).
func funcName(e ast.Expr) string {
	switch f := e.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	case *ast.IndexExpr:
		return funcName(f.X)
	}
	return ""
}
