package console

import (
	"fmt"
	"html"
	"math"
	"strings"
	"time"
)

// series is one line of a chart.
type series struct {
	Name   string
	Colour string // its line's (contrast ≥ 4.5:1 on white)
	Value  func(Point) float64
}

// chartSpec is one chart of the live page.
type chartSpec struct {
	ID, Title, Unit string
	Series          []series
}

var charts = []chartSpec{
	{ID: "ops", Title: "Operations per second", Unit: "ops/s", Series: []series{
		{"put (key commits)", "#0b5cad", func(p Point) float64 { return p.PutOps }},
		{"get (key look-ups)", "#b34700", func(p Point) float64 { return p.GetOps }}}},
	{ID: "mbps", Title: "Datanode throughput", Unit: "MB/s", Series: []series{
		{"written (all replicas)", "#0b5cad", func(p Point) float64 { return p.WriteMBps }},
		{"read", "#b34700", func(p Point) float64 { return p.ReadMBps }}}},
	{ID: "latency", Title: "Mean latency", Unit: "ms", Series: []series{
		{"commit (meta)", "#0b5cad", func(p Point) float64 { return p.PutLatencyMs }},
		{"look-up (meta)", "#b34700", func(p Point) float64 { return p.GetLatencyMs }},
		{"chunk request (datanode)", "#2d7d2d", func(p Point) float64 { return p.ChunkLatencyMs }}}},
}

func chartByID(id string) (chartSpec, bool) {
	for _, c := range charts {
		if c.ID == id {
			return c, true
		}
	}
	return chartSpec{}, false
}

// niceMax rounds v up to 1, 2 or 5 times a power of ten.
func niceMax(v float64) float64 {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// fmtNum prints a figure with at most 3 significant digits.
func fmtNum(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// renderSVG draws spec over points (the last History before now) as a
// standalone SVG document: lines, axes, a legend with each series' last
// value, a title and a description for screen readers.
func renderSVG(spec chartSpec, points []Point, now time.Time) string {
	const w, h, left, right, top, bottom = 640.0, 240.0, 56.0, 12.0, 30.0, 58.0
	pw, ph := w-left-right, h-top-bottom
	start := now.Add(-History)
	hi := 0.0
	for _, p := range points {
		for _, s := range spec.Series {
			hi = max(hi, s.Value(p))
		}
	}
	hi = niceMax(hi)
	x := func(t time.Time) float64 { return left + pw*max(0, float64(t.Sub(start)))/float64(History) }
	y := func(v float64) float64 { return top + ph - ph*min(v, hi)/hi }
	var b strings.Builder
	var last []string
	for _, s := range spec.Series {
		v := 0.0
		if len(points) > 0 {
			v = s.Value(points[len(points)-1])
		}
		last = append(last, fmt.Sprintf("%s %s %s", s.Name, fmtNum(v), spec.Unit))
	}
	desc := fmt.Sprintf("%s over the last hour, %d samples; latest: %s", spec.Title, len(points), strings.Join(last, "; "))
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %.0f %.0f" role="img" aria-labelledby="t-%s d-%s" class="chart">`, w, h, spec.ID, spec.ID)
	fmt.Fprintf(&b, `<title id="t-%s">%s (%s)</title><desc id="d-%s">%s</desc>`, spec.ID, html.EscapeString(spec.Title), html.EscapeString(spec.Unit), spec.ID, html.EscapeString(desc))
	// Presentation attributes, no <style>: the console's CSP allows no
	// inline style.
	b.WriteString(`<g font-family="sans-serif" font-size="12" fill="#222">`)
	b.WriteString(`<rect width="100%" height="100%" fill="#fff"/>`)
	fmt.Fprintf(&b, `<text x="%.0f" y="18" font-weight="bold">%s (%s)</text>`, left, html.EscapeString(spec.Title), html.EscapeString(spec.Unit))
	for i := 0; i <= 4; i++ {
		v := hi * float64(i) / 4
		yy := y(v)
		fmt.Fprintf(&b, `<line stroke="#ddd" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f"/><text x="%.1f" y="%.1f" text-anchor="end">%s</text>`,
			left, left+pw, yy, yy, left-6, yy+4, fmtNum(v))
	}
	for m := 0; m <= 60; m += 15 {
		xx := left + pw*float64(m)/60
		label := fmt.Sprintf("-%dm", 60-m)
		if m == 60 {
			label = "now"
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, xx, top+ph+16, label)
	}
	fmt.Fprintf(&b, `<line stroke="#555" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f"/>`, left, left+pw, top+ph, top+ph)
	for i, s := range spec.Series {
		var pts []string
		for _, p := range points {
			if p.T.Before(start) {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.T), y(s.Value(p))))
		}
		if len(pts) > 0 {
			fmt.Fprintf(&b, `<polyline fill="none" stroke-width="2" stroke="%s" points="%s"/>`, s.Colour, strings.Join(pts, " "))
		}
		lx := left + float64(i)*pw/float64(len(spec.Series))
		fmt.Fprintf(&b, `<rect fill="%s" x="%.1f" y="%.1f" width="12" height="4"/><text x="%.1f" y="%.1f">%s</text>`,
			s.Colour, lx, h-14, lx+16, h-9, html.EscapeString(last[i]))
	}
	b.WriteString(`</g></svg>`)
	return b.String()
}
