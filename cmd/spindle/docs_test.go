package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The docs check (issue 31, item 8): every `spindle ...` command line of
// README.md and docs/*.md names a command of the real command tree
// (newRootCmd, in-process) and only flags that command has. `make
// docs-check` runs these tests alone; `make test` runs them with the rest.
//
// What counts as a command line, precisely:
//
//   - in a fenced code block whose info string is empty, sh, bash, shell or
//     console: each line (backslash continuations joined), cut at a `#`
//     comment and split at the shell's separators (`|`, `||`, `&&`, `;`,
//     `&` as words of their own, or `;` ending a word);
//   - in inline code (a backtick span, which may wrap a line) outside fenced
//     blocks: the span's text, split the same way;
//
// and of those pieces, only the ones whose first word, after an optional
// `$ ` prompt and `NAME=value` environment assignments, is `spindle` (or a
// path ending in /spindle, such as bin/spindle). A bare `spindle` (the
// binary's name) is not checked.
//
// The words after `spindle` are resolved against the tree: a word that is
// a subcommand of the command so far goes one level down (`a|b|c`, as the
// docs' synopses write alternatives, checks each); a placeholder there
// (`<command>`, `COMMAND`, `...`) ends the check of that line. Once a
// command without subcommands is reached, its remaining words are
// arguments, except the flags: every `--flag`, `--flag=value` and `-x`
// must be a flag of that command or a persistent flag of a parent (a
// flag's value, for flags that take one, is skipped; `[--flag N]`
// brackets of the synopses are read through). A command with subcommands
// takes no arguments (strictSubcommands): a word there that is not one of
// its subcommands is an error.

// docsAllowlist holds the doc command lines that are deliberately not
// commands of the tree, by their exact text (after the prompt and
// environment assignments), with the reason.
var docsAllowlist = map[string]string{
	// README's exit statuses: the example of an unknown command, which
	// spindle refuses with exit status 2 and a suggestion.
	"spindle bench nonsense": "the README's example of a usage error",
}

// docCommand is one command line found in a doc.
type docCommand struct {
	file string
	line int
	text string   // the piece as written, from `spindle` on
	args []string // its words after `spindle`
}

var checkedFenceLangs = map[string]bool{"": true, "sh": true, "bash": true, "shell": true, "console": true}

// docCommands returns the spindle command lines of a markdown text.
func docCommands(file, text string) []docCommand {
	var out []docCommand
	lines := strings.Split(text, "\n")
	var para []string // the current paragraph outside fenced blocks
	paraStart := 0
	flushPara := func() {
		if len(para) > 0 {
			out = append(out, inlineCommands(file, paraStart, strings.Join(para, "\n"))...)
		}
		para = nil
	}
	fence, fenceLang := "", ""
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]) == "" {
				fence = ""
				continue
			}
			if !checkedFenceLangs[fenceLang] {
				continue
			}
			start := i
			for strings.HasSuffix(line, "\\") && i+1 < len(lines) {
				i++
				line = strings.TrimSuffix(line, "\\") + " " + strings.TrimSpace(lines[i])
			}
			out = append(out, shellCommands(file, start+1, line)...)
			continue
		}
		if m := regexp.MustCompile("^(```+|~~~+)\\s*([A-Za-z0-9_+-]*)").FindStringSubmatch(trimmed); m != nil {
			flushPara()
			fence, fenceLang = m[1], strings.ToLower(m[2])
			continue
		}
		if trimmed == "" {
			flushPara()
			continue
		}
		if len(para) == 0 {
			paraStart = i + 1
		}
		para = append(para, line)
	}
	flushPara()
	return out
}

// inlineCommands returns the command lines of a paragraph's code spans;
// first is the paragraph's first line number.
func inlineCommands(file string, first int, para string) []docCommand {
	var out []docCommand
	for i := 0; i < len(para); {
		if para[i] != '`' {
			i++
			continue
		}
		n := 0
		for i+n < len(para) && para[i+n] == '`' {
			n++
		}
		open := strings.Repeat("`", n)
		end := -1
		for j := i + n; j < len(para); {
			k := strings.Index(para[j:], open)
			if k < 0 {
				break
			}
			k += j
			m := 0
			for k+m < len(para) && para[k+m] == '`' {
				m++
			}
			if m == n {
				end = k
				break
			}
			j = k + m
		}
		if end < 0 {
			i += n // an unmatched run is literal text
			continue
		}
		span := para[i+n : end]
		span = strings.ReplaceAll(span, "\n", " ")
		span = strings.ReplaceAll(span, `\|`, "|") // a table cell's escaped pipe
		line := first + strings.Count(para[:i], "\n")
		out = append(out, shellCommands(file, line, span)...)
		i = end + n
	}
	return out
}

// wrappers are the commands that run the command given after their own
// options.
var wrappers = map[string]bool{"sudo": true, "time": true, "nohup": true, "exec": true, "env": true, "strace": true}

var envAssign = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// shellCommands splits a line into its shell pieces and returns those that
// run spindle.
func shellCommands(file string, line int, text string) []docCommand {
	var out []docCommand
	for _, piece := range shellPieces(text) {
		words := piece
		if len(words) > 0 && words[0] == "$" {
			words = words[1:]
		}
		for len(words) > 0 && envAssign.MatchString(words[0]) {
			words = words[1:]
		}
		if len(words) > 0 && wrappers[words[0]] {
			// strace -f -c spindle ...: the words up to spindle
			for len(words) > 0 && words[0] != "spindle" && !strings.HasSuffix(words[0], "/spindle") {
				words = words[1:]
			}
		}
		if len(words) < 2 || (words[0] != "spindle" && !strings.HasSuffix(words[0], "/spindle")) {
			continue
		}
		out = append(out, docCommand{file: file, line: line, text: "spindle " + strings.Join(words[1:], " "), args: words[1:]})
	}
	return out
}

// shellPieces splits text into words (quotes and $(...) kept whole, quotes
// removed), cut at a comment, and groups them into the pieces between
// shell separators.
func shellPieces(text string) [][]string {
	var pieces [][]string
	var cur []string
	var word strings.Builder
	inWord, afterPipe := false, false
	endWord := func() {
		if !inWord {
			return
		}
		w := word.String()
		word.Reset()
		inWord = false
		if afterPipe {
			afterPipe = false
			cur = cur[:len(cur)-1] // the | held back below
			if !strings.HasPrefix(strings.TrimLeft(w, "["), "-") {
				pieces = append(pieces, cur) // it was a pipe
				cur = nil
			}
		}
		switch {
		case w == "|" && len(cur) > 0:
			// `[--dir DIR | --meta ADDR]`: in a synopsis, a | followed by
			// a flag separates alternatives, not commands (no command
			// starts with a dash); held back until the next word says.
			cur = append(cur, w)
			afterPipe = true
		case w == "|" || w == "||" || w == "&&" || w == ";" || w == "&" || w == "|&":
			pieces = append(pieces, cur)
			cur = nil
		case strings.HasSuffix(w, ";"):
			cur = append(cur, strings.TrimSuffix(w, ";"))
			pieces = append(pieces, cur)
			cur = nil
		default:
			cur = append(cur, w)
		}
	}
	// end closes the last piece.
	end := func() [][]string {
		endWord()
		if afterPipe {
			cur = cur[:len(cur)-1]
		}
		return append(pieces, cur)
	}
	var quote rune
	depth := 0 // $( ... ) nesting
	runes := []rune(text)
	for i := 0; i < len(runes); i++ {
		r := runes[i]
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				word.WriteRune(r)
			}
		case depth > 0:
			word.WriteRune(r)
			if r == '(' {
				depth++
			} else if r == ')' {
				depth--
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == '$' && i+1 < len(runes) && runes[i+1] == '(':
			word.WriteString("$(")
			i++
			depth, inWord = 1, true
		case r == ' ' || r == '\t':
			endWord()
		case r == '#' && !inWord:
			return end()
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	return end()
}

// isPlaceholder reports whether a word stands for a command or argument
// not spelled out: <command>, COMMAND, ..., ….
func isPlaceholder(w string) bool {
	if strings.HasPrefix(w, "<") || strings.HasPrefix(w, "...") || strings.HasPrefix(w, "…") {
		return true
	}
	return w != "" && strings.ToUpper(w) == w && strings.ToLower(w) != w
}

// lookupFlag finds a flag (name without dashes, or a one-letter shorthand)
// on c or among its parents' persistent flags.
func lookupFlag(c *cobra.Command, name string, short bool) *pflag.Flag {
	c.InitDefaultHelpFlag()
	if !c.HasParent() {
		c.InitDefaultVersionFlag()
	}
	for _, fs := range []*pflag.FlagSet{c.Flags(), c.InheritedFlags()} {
		if short {
			if f := fs.ShorthandLookup(name); f != nil {
				return f
			}
		} else if f := fs.Lookup(name); f != nil {
			return f
		}
	}
	return nil
}

// checkFlag checks the flag word w on c; it returns a problem, if any, and
// whether the next word is the flag's value.
func checkFlag(c *cobra.Command, w string) (problem string, takesValue bool) {
	name, short := strings.TrimPrefix(w, "--"), false
	if !strings.HasPrefix(w, "--") {
		name, short = strings.TrimPrefix(w, "-"), true
	}
	name, value, hasValue := strings.Cut(name, "=")
	if short && len(name) != 1 {
		return fmt.Sprintf("%q is not a flag spindle has (one-letter shorthands only)", w), false
	}
	f := lookupFlag(c, name, short)
	if f == nil {
		return fmt.Sprintf("%s has no flag %s", c.CommandPath(), strings.TrimSuffix(w, "="+value)), false
	}
	return "", !hasValue && f.NoOptDefVal == ""
}

// checkDocCommand resolves a doc command line against the tree rooted at
// root and returns its problems.
func checkDocCommand(root *cobra.Command, args []string) []string {
	_, problems := resolveDocCommand(root, args)
	return problems
}

// resolveDocCommand resolves a doc command line against the tree rooted at
// root: the commands it names (several for a|b|c) and its problems.
func resolveDocCommand(root *cobra.Command, args []string) (named []*cobra.Command, problems []string) {
	var walk func(c *cobra.Command, rest []string)
	walk = func(c *cobra.Command, rest []string) {
		named = append(named, c)
		for i := 0; i < len(rest); i++ {
			w := strings.TrimRight(strings.TrimLeft(rest[i], "["), "]")
			switch {
			case w == "" || w == "-" || w == "--":
				continue
			case strings.HasPrefix(w, "-") && len(w) > 1 && !(w[1] >= '0' && w[1] <= '9'):
				p, takesValue := checkFlag(c, w)
				if p != "" {
					problems = append(problems, p)
				} else if takesValue {
					i++
				}
				continue
			case !c.HasSubCommands():
				continue // an argument
			case isPlaceholder(w):
				return // the command is not spelled out
			}
			var found []*cobra.Command
			for _, alt := range strings.Split(w, "|") {
				if isPlaceholder(alt) {
					continue // admin nodes|…
				}
				sub := findSub(c, alt)
				if sub == nil {
					problems = append(problems, fmt.Sprintf("%s has no command %q (its commands: %s)", c.CommandPath(), alt, subcommandNames(c)))
					continue
				}
				found = append(found, sub)
			}
			for _, sub := range found {
				walk(sub, rest[i+1:])
			}
			return
		}
	}
	walk(root, args)
	return named, problems
}

// findSub returns c's subcommand called name (or one of its aliases).
func findSub(c *cobra.Command, name string) *cobra.Command {
	for _, sub := range c.Commands() {
		if sub.Name() == name || slices.Contains(sub.Aliases, name) {
			return sub
		}
	}
	return nil
}

// docFiles are the docs the check reads, relative to the repository root.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join("..", "..", "README.md")}, files...)
}

// TestDocsCommandsExist: every spindle command line of README.md and
// docs/*.md names a real command and real flags.
func TestDocsCommandsExist(t *testing.T) {
	root := newRootCmd()
	checked, used := 0, map[string]bool{}
	for _, path := range docFiles(t) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(filepath.ToSlash(path), "../../")
		for _, dc := range docCommands(name, string(b)) {
			checked++
			if reason, ok := docsAllowlist[dc.text]; ok {
				used[dc.text] = true
				t.Logf("%s:%d: not checked (%s): %s", dc.file, dc.line, reason, dc.text)
				continue
			}
			for _, p := range checkDocCommand(root, dc.args) {
				t.Errorf("%s:%d: %s\n\tin: %s", dc.file, dc.line, p, dc.text)
			}
		}
	}
	for text := range docsAllowlist {
		if !used[text] {
			t.Errorf("docsAllowlist: %q is in no doc any more: remove it", text)
		}
	}
	if checked < 100 {
		t.Errorf("only %d command lines found in the docs: is the extraction broken?", checked)
	}
	t.Logf("%d command lines checked", checked)
}

// TestDocsCheckCatchesMistakes runs the check on a small document with a
// wrong flag, a wrong command and lines that are not commands.
func TestDocsCheckCatchesMistakes(t *testing.T) {
	const doc = "# Fixture\n" +
		"\n" +
		"Run `spindle server --dir D --datanode 3` (a wrong flag: --datanodes),\n" +
		"then `spindle admin meta demote 4` (no such command), or `spindle\n" +
		"admin nodes|bogus` (wrapped: one good, one bad). Not commands:\n" +
		"`spindle <command> --help`, `spindle`, `spindle COMMAND`, spindle put --nope (prose).\n" +
		"\n" +
		"```sh\n" +
		"$ SPINDLE_META=a:1 spindle put --size 1MiB b/k - --inflight 8   # fine\n" +
		"spindle get -r b/p dir && spindle ls b --maxx 3   # --maxx wrong\n" +
		"echo spindle put --nope | spindle stat b/k --json\n" +
		"bin/spindle bench chunk-write --local \\\n" +
		"  --chunk-sise 1KiB\n" +
		"spindle admin meta backup /b/m-$(date +%Y %m) --meta 10.0.0.1:9860\n" +
		"strace -f -c spindle bench chunk-write --locall\n" +
		"```\n" +
		"\n" +
		"```json\n" +
		"spindle put --not-checked-in-json\n" +
		"```\n" +
		"\n" +
		"```\n" +
		"spindle admin safemode status|exit [--json] [--jsn]\n" +
		"spindle bucket create NAME;  spindle bucket rm NAME [--forse]\n" +
		"spindle bench key-write [--dir DIR | --meta ADDR | --metaa ADDR] | sort\n" +
		"spindle admin nodes|… [--json]\n" +
		"```\n"
	root := newRootCmd()
	var got []string
	for _, dc := range docCommands("fixture.md", doc) {
		for _, p := range checkDocCommand(root, dc.args) {
			got = append(got, fmt.Sprintf("%d: %s", dc.line, p))
		}
	}
	want := []string{
		"3: spindle server has no flag --datanode",
		`4: spindle admin meta has no command "demote" (its commands: add, backup, promote, remove, replace)`,
		`4: spindle admin has no command "bogus" (its commands: ` + subcommandNames(findSub(root, "admin")) + `)`,
		"10: spindle ls has no flag --maxx",
		"12: spindle bench chunk-write has no flag --chunk-sise",
		"15: spindle bench chunk-write has no flag --locall",
		"23: spindle admin safemode status has no flag --jsn",
		"23: spindle admin safemode exit has no flag --jsn",
		"24: spindle bucket rm has no flag --forse",
		"25: spindle bench key-write has no flag --metaa",
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems found:\n\t%s\nwant:\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
	// The words of a line with quotes, $(...) and a separator.
	dcs := docCommands("f.md", "```sh\nX='a b' spindle put \"b/k k\" $(echo 1 2); spindle version\n```\n")
	if len(dcs) != 2 || !slices.Equal(dcs[0].args, []string{"put", "b/k k", "$(echo 1 2)"}) || dcs[1].text != "spindle version" {
		t.Errorf("words: %+v", dcs)
	}
}

// TestReadmeListsEveryCommand: the README's command list (the fenced block
// of "## The command line") names every command of the tree.
func TestReadmeListsEveryCommand(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	_, after, ok := strings.Cut(text, "\n## The command line\n")
	if !ok {
		t.Fatal(`README.md has no "## The command line" section`)
	}
	start := strings.Index(after, "\n```")
	end := strings.Index(after[start+4:], "\n```")
	if start < 0 || end < 0 {
		t.Fatal(`README.md's "## The command line" has no fenced block`)
	}
	block := after[start : start+4+end+4]
	root := newRootCmd()
	listed := map[*cobra.Command]bool{}
	for _, dc := range docCommands("README.md", block) {
		named, _ := resolveDocCommand(root, dc.args) // TestDocsCommandsExist reports the problems
		for _, c := range named {
			listed[c] = true
		}
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if !sub.IsAvailableCommand() {
				continue
			}
			if !listed[sub] {
				t.Errorf("README.md's command list does not name %q", sub.CommandPath())
			}
			walk(sub)
		}
	}
	walk(root)
}
