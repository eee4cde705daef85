package console

import (
	"html"
	"html/template"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// reportFile is what `spindle report run` and `render` write in a run
// directory (package report's ReportFile).
const reportFile = "report.md"

// reportRun is one run directory of ReportsDir.
type reportRun struct {
	Name     string
	Modified time.Time
	Charts   int
}

// runs lists ReportsDir's run directories (those holding report.md),
// newest first.
func (c *Console) runs() ([]reportRun, error) {
	if c.cfg.ReportsDir == "" {
		return nil, nil
	}
	ents, err := os.ReadDir(c.cfg.ReportsDir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []reportRun
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		st, err := os.Stat(filepath.Join(c.cfg.ReportsDir, e.Name(), reportFile))
		if err != nil {
			continue
		}
		svgs, _ := filepath.Glob(filepath.Join(c.cfg.ReportsDir, e.Name(), "*.svg")) // only a bad pattern fails
		out = append(out, reportRun{Name: e.Name(), Modified: st.ModTime(), Charts: len(svgs)})
	}
	slices.SortFunc(out, func(a, b reportRun) int { return b.Modified.Compare(a.Modified) })
	return out, nil
}

func (c *Console) pageReports(w http.ResponseWriter, r *http.Request, ss *session) {
	runs, err := c.runs()
	if err != nil {
		c.errorPage(w, r, ss, err)
		return
	}
	c.render(w, r, ss, "reports", http.StatusOK, map[string]any{"Runs": runs, "Dir": c.cfg.ReportsDir})
}

// reportTypes are the files of a run directory the console serves.
var reportTypes = map[string]string{".svg": "image/svg+xml", ".png": "image/png", ".json": "application/json", ".md": "text/plain; charset=utf-8"}

// pageReport shows a run's report.md (file "") or serves one of its files.
func (c *Console) pageReport(w http.ResponseWriter, r *http.Request, ss *session) {
	run, file := r.PathValue("run"), r.PathValue("file")
	if c.cfg.ReportsDir == "" || !cleanRel(run) || strings.Contains(run, "/") || (file != "" && (!cleanRel(file) || strings.Contains(file, "/"))) {
		http.NotFound(w, r)
		return
	}
	dir := filepath.Join(c.cfg.ReportsDir, run)
	if file != "" {
		ct, ok := reportTypes[filepath.Ext(file)]
		if !ok {
			http.NotFound(w, r)
			return
		}
		securityHeaders(w)
		w.Header().Set("Content-Type", ct)
		http.ServeFile(w, r, filepath.Join(dir, file))
		return
	}
	md, err := os.ReadFile(filepath.Join(dir, reportFile))
	if err != nil {
		http.NotFound(w, r)
		return
	}
	c.render(w, r, ss, "report", http.StatusOK, map[string]any{"Run": run, "Body": markdown(string(md), "/ui/reports/"+run+"/")})
}

var (
	mdImage = regexp.MustCompile(`!\[([^\]]*)\]\(([^)\s]+)\)`)
	mdLink  = regexp.MustCompile(`\[([^\]]+)\]\(([^)\s]+)\)`)
	mdCode  = regexp.MustCompile("`([^`]+)`")
	mdBold  = regexp.MustCompile(`\*\*([^*]+)\*\*`)
)

// localFile says name is a file of the run directory itself.
func localFile(name string) bool {
	return cleanRel(name) && !strings.ContainsAny(name, "/:?#\\")
}

// inline renders a line's images (local files of the run only), links
// (http(s) and local), code spans and bold, the rest escaped.
func inline(s, base string) string {
	s = html.EscapeString(s)
	s = mdImage.ReplaceAllStringFunc(s, func(m string) string {
		g := mdImage.FindStringSubmatch(m)
		if !localFile(g[2]) {
			return g[1]
		}
		return `<img src="` + base + g[2] + `" alt="` + g[1] + `">`
	})
	s = mdLink.ReplaceAllStringFunc(s, func(m string) string {
		g := mdLink.FindStringSubmatch(m)
		u := g[2]
		switch {
		case strings.HasPrefix(u, "https://"), strings.HasPrefix(u, "http://"):
		case localFile(u):
			u = base + u
		default:
			return g[1]
		}
		return `<a href="` + u + `">` + g[1] + `</a>`
	})
	s = mdCode.ReplaceAllString(s, "<code>$1</code>")
	return mdBold.ReplaceAllString(s, "<strong>$1</strong>")
}

// markdown renders the Markdown `spindle report` writes (headings,
// paragraphs, lists, tables, fenced code, images): a small subset, every
// character of the source escaped.
func markdown(src, base string) template.HTML {
	var b strings.Builder
	lines := strings.Split(src, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case strings.HasPrefix(l, "```"):
			b.WriteString("<pre>")
			for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
				b.WriteString(html.EscapeString(lines[i]) + "\n")
			}
			b.WriteString("</pre>\n")
		case strings.HasPrefix(l, "#"):
			n := len(l) - len(strings.TrimLeft(l, "#"))
			lvl := min(n+1, 6) // the page's h1 is the console's
			b.WriteString("<h" + string(rune('0'+lvl)) + ">" + inline(strings.TrimSpace(l[n:]), base) + "</h" + string(rune('0'+lvl)) + ">\n")
		case strings.HasPrefix(l, "|"):
			b.WriteString(`<div class="scroll"><table>`)
			head := true
			for ; i < len(lines) && strings.HasPrefix(lines[i], "|"); i++ {
				cells := strings.Split(strings.Trim(strings.TrimSpace(lines[i]), "|"), "|")
				if strings.Trim(strings.Join(cells, ""), "-: ") == "" {
					continue // the separator row
				}
				tag := "td"
				if head {
					tag = "th"
				}
				b.WriteString("<tr>")
				for _, cell := range cells {
					b.WriteString("<" + tag + ">" + inline(strings.TrimSpace(cell), base) + "</" + tag + ">")
				}
				b.WriteString("</tr>")
				head = false
			}
			i--
			b.WriteString("</table></div>\n")
		case strings.HasPrefix(l, "- "), strings.HasPrefix(l, "* "):
			b.WriteString("<ul>")
			for ; i < len(lines) && (strings.HasPrefix(lines[i], "- ") || strings.HasPrefix(lines[i], "* ")); i++ {
				b.WriteString("<li>" + inline(lines[i][2:], base) + "</li>")
			}
			i--
			b.WriteString("</ul>\n")
		case strings.TrimSpace(l) == "":
		default:
			b.WriteString("<p>" + inline(l, base) + "</p>\n")
		}
	}
	return template.HTML(b.String()) // every piece escaped above
}
