package report

import (
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/spindle-store/spindle/internal/chart"
	"github.com/spindle-store/spindle/internal/vfs"
)

// mdTable is a Markdown table; numeric columns are right-aligned.
type mdTable struct {
	head  []string
	right []bool
	rows  [][]string
}

func newTable(head ...string) *mdTable {
	t := &mdTable{head: head, right: make([]bool, len(head))}
	for i := 1; i < len(head); i++ {
		t.right[i] = true
	}
	return t
}

// left makes column i left-aligned.
func (t *mdTable) left(cols ...int) *mdTable {
	for _, i := range cols {
		t.right[i] = false
	}
	return t
}

func (t *mdTable) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *mdTable) write(b *strings.Builder) {
	if len(t.rows) == 0 {
		return
	}
	cell := func(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ") }
	b.WriteString("|")
	for _, h := range t.head {
		b.WriteString(" " + cell(h) + " |")
	}
	b.WriteString("\n|")
	for _, r := range t.right {
		if r {
			b.WriteString("---:|")
		} else {
			b.WriteString("---|")
		}
	}
	b.WriteString("\n")
	for _, row := range t.rows {
		b.WriteString("|")
		for i := range t.head {
			c := ""
			if i < len(row) {
				c = row[i]
			}
			b.WriteString(" " + cell(c) + " |")
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

// fmtNum prints a figure with about four significant digits, thousands
// separated; NaN (not measured, not shown) prints as a dash.
func fmtNum(v float64) string {
	a := math.Abs(v)
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "—"
	case a >= 1000:
		return fmtInt(int64(math.Round(v)))
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 3, 64)
	case a == 0:
		return "0"
	case a >= 0.01:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	// Three significant digits, without an exponent.
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 3, 64), 64)
	return strconv.FormatFloat(r, 'f', -1, 64)
}

// fmtInt prints n with thousands separators.
func fmtInt(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// fmtDelta prints the relative change from a to b: "+3.5%", "-12%".
func fmtDelta(a, b float64) string {
	if math.IsNaN(a) || math.IsNaN(b) || a == 0 {
		return "—"
	}
	d := (b - a) / math.Abs(a) * 100
	switch {
	case math.Abs(d) >= 100:
		return fmt.Sprintf("%+.0f%%", d)
	case math.Abs(d) >= 10:
		return fmt.Sprintf("%+.1f%%", d)
	}
	return fmt.Sprintf("%+.2f%%", d)
}

// chartFile is a chart of a report and the name of its file (without
// extension).
type chartFile struct {
	name string
	bars chart.Bars
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// fileName turns a label into a file name part.
func fileName(s string) string {
	s = strings.Trim(unsafeName.ReplaceAllString(s, "-"), "-")
	if len(s) > 80 {
		s = s[:80]
	}
	if s == "" {
		s = "chart"
	}
	return s
}

// writeCharts writes each chart as dir/NAME.svg (and .png when png) and
// returns the Markdown image line of each, by name.
func writeCharts(dir string, charts []chartFile, png bool) (map[string]string, error) {
	refs := make(map[string]string, len(charts))
	for _, c := range charts {
		if err := c.bars.WriteFile(filepath.Join(dir, c.name+".svg")); err != nil {
			return nil, fmt.Errorf("report: chart %s: %w", c.name, err)
		}
		if png {
			if err := c.bars.WriteFile(filepath.Join(dir, c.name+".png")); err != nil {
				return nil, fmt.Errorf("report: chart %s: %w", c.name, err)
			}
		}
		refs[c.name] = fmt.Sprintf("![%s](%s.svg)\n\n", strings.ReplaceAll(c.bars.Title, "]", ")"), c.name)
	}
	return refs, nil
}

// writeFileAtomic writes data to path whole or not at all (vfs.WriteFileAtomic:
// the report's files are replaced like any other state file).
func writeFileAtomic(path string, data []byte) error {
	if err := vfs.WriteFileAtomic(vfs.Default, path, data); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}
