// Package chart draws the grouped bar charts of Spindle's reports, in the
// manner of seed 003's comparisons: one group of bars per category (a
// syscall, a bench), one bar per series (a run, a configuration), each
// series in its own colour (green, red, yellow, then blue, purple, orange,
// grey), the value written at the end of every bar, the legend under the
// plot. Bars are horizontal, so that long category names stay readable.
//
// Charts are written as SVG (vgsvg, text as <text> elements, fonts not
// embedded) or PNG (vgimg, 96 dpi), both drawn by gonum.org/v1/plot.
//
// Invariants: a Bars is validated before anything is drawn (at least one
// category and one series, at most MaxCategories and MaxSeries, every
// series as long as Categories, every value finite and >= 0 or NaN for
// "missing", drawn as no bar with the label "n/a"); the height of the
// image grows with the number of bars, so bars never overlap.
//
// Concurrency: functions are safe for concurrent use; they share no
// mutable state (fonts are set per chart, not through gonum's globals).
package chart

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/spindle-store/spindle/internal/vfs"
)

// Limits of one chart.
const (
	MaxCategories = 64
	MaxSeries     = 8
	// MaxLabelRunes bounds category names, MaxLegendRunes series names;
	// longer ones are shortened with an ellipsis.
	MaxLabelRunes  = 48
	MaxLegendRunes = 96
)

// Geometry, in points (1/72 inch).
const (
	width        = 640
	barThickness = 11
	groupGap     = 9
	plotOverhead = 80 // title, value axis and its label, margins
	pngDPI       = 96
)

// Formats.
const (
	SVG = "svg"
	PNG = "png"
)

// Palette is the series colours in order: seed 003's green, red and
// yellow first.
var Palette = []color.RGBA{
	{R: 0x43, G: 0xa0, B: 0x47, A: 0xff}, // green
	{R: 0xe5, G: 0x39, B: 0x35, A: 0xff}, // red
	{R: 0xfb, G: 0xc0, B: 0x2d, A: 0xff}, // yellow
	{R: 0x1e, G: 0x88, B: 0xe5, A: 0xff}, // blue
	{R: 0x8e, G: 0x24, B: 0xaa, A: 0xff}, // purple
	{R: 0xfb, G: 0x8c, B: 0x00, A: 0xff}, // orange
	{R: 0x75, G: 0x75, B: 0x75, A: 0xff}, // grey
	{R: 0x00, G: 0x89, B: 0x7b, A: 0xff}, // teal
}

// Series is one colour of bars: one value per category.
type Series struct {
	Name   string
	Values []float64 // NaN: missing (no bar, label "n/a")
	// Labels, when not nil, are written at the bar ends instead of the
	// formatted values (e.g. absolute figures on a relative chart).
	Labels []string
}

// Bars is a grouped horizontal bar chart. Categories are drawn top to
// bottom in the order given; within a group, series top to bottom.
type Bars struct {
	Title      string
	ValueLabel string // the value axis, with its unit: "average time (µs)"
	Categories []string
	Series     []Series
}

// Validate checks the invariants in the package doc.
func (b *Bars) Validate() error {
	switch {
	case len(b.Categories) == 0:
		return errors.New("chart: no categories")
	case len(b.Categories) > MaxCategories:
		return fmt.Errorf("chart: %d categories, at most %d", len(b.Categories), MaxCategories)
	case len(b.Series) == 0:
		return errors.New("chart: no series")
	case len(b.Series) > MaxSeries:
		return fmt.Errorf("chart: %d series, at most %d", len(b.Series), MaxSeries)
	}
	for _, s := range b.Series {
		if len(s.Values) != len(b.Categories) {
			return fmt.Errorf("chart: series %q has %d values for %d categories", s.Name, len(s.Values), len(b.Categories))
		}
		if s.Labels != nil && len(s.Labels) != len(b.Categories) {
			return fmt.Errorf("chart: series %q has %d labels for %d categories", s.Name, len(s.Labels), len(b.Categories))
		}
		for i, v := range s.Values {
			if math.IsInf(v, 0) || v < 0 {
				return fmt.Errorf("chart: series %q, %s: value %v, want finite and >= 0 (NaN for missing)", s.Name, b.Categories[i], v)
			}
		}
	}
	return nil
}

// Size returns the image size in points.
func (b *Bars) Size() (w, h vg.Length) {
	group := vg.Length(len(b.Series)*barThickness + groupGap)
	legend := vg.Length(len(b.Series))*16 + 16
	return width, vg.Length(len(b.Categories))*group + plotOverhead + legend
}

// Render draws the chart in format (SVG or PNG) to w.
func (b *Bars) Render(w io.Writer, format string) error {
	if err := b.Validate(); err != nil {
		return err
	}
	wd, ht := b.Size()
	var c vg.CanvasWriterTo
	switch format {
	case SVG:
		c = vgsvg.New(wd, ht)
	case PNG:
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(wd, ht), vgimg.UseDPI(pngDPI), vgimg.UseBackgroundColor(color.White))}
	default:
		return fmt.Errorf("chart: format %q, want %q or %q", format, SVG, PNG)
	}
	if err := b.draw(draw.New(c)); err != nil {
		return err
	}
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return fmt.Errorf("chart: write %s: %w", format, err)
	}
	out := buf.Bytes()
	if format == SVG {
		// Text was laid out with Liberation Sans' metrics; name the fonts
		// that share them (Arimo, Arial, Helvetica) as fallbacks so that
		// a viewer without Liberation draws text of the same width.
		out = bytes.ReplaceAll(out, []byte("font-family:Liberation Sans;"), []byte(svgFontFamily))
	}
	if _, err := w.Write(out); err != nil {
		return fmt.Errorf("chart: write %s: %w", format, err)
	}
	return nil
}

// svgFontFamily is the font-family of every SVG text.
const svgFontFamily = "font-family:'Liberation Sans',Arimo,Arial,Helvetica,sans-serif;"

// WriteFile renders the chart to path, in the format its extension names
// (.svg or .png); the file is written whole or not at all.
func (b *Bars) WriteFile(path string) error {
	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(path)), ".")
	var buf bytes.Buffer
	if err := b.Render(&buf, format); err != nil {
		return fmt.Errorf("%w (%s)", err, path)
	}
	if err := vfs.WriteFileAtomic(vfs.Default, path, buf.Bytes()); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	return nil
}

var (
	sans     = font.Font{Typeface: "Liberation", Variant: "Sans"}
	sansBold = font.Font{Typeface: "Liberation", Variant: "Sans", Weight: xfont.WeightBold}
	ink      = color.RGBA{R: 0x21, G: 0x21, B: 0x21, A: 0xff}
)

func style(f font.Font, size vg.Length) text.Style {
	return text.Style{Color: ink, Font: font.From(f, size), Handler: plot.DefaultTextHandler}
}

// setFont changes the font of st and keeps its alignment.
func setFont(st *text.Style, f font.Font, size vg.Length) {
	st.Color = ink
	st.Font = font.From(f, size)
}

// draw lays the chart out on c: the plot above, the legend below it.
func (b *Bars) draw(c draw.Canvas) error {
	n, k := len(b.Categories), len(b.Series)
	p := plot.New()
	p.BackgroundColor = color.White
	p.Title.Text = shorten(b.Title, 2*MaxLabelRunes)
	setFont(&p.Title.TextStyle, sansBold, 13)
	p.Title.Padding = 6
	p.X.Label.Text = b.ValueLabel
	setFont(&p.X.Label.TextStyle, sans, 11)
	setFont(&p.X.Tick.Label, sans, 9)
	setFont(&p.Y.Tick.Label, sans, 10)
	p.X.Min = 0
	p.X.Tick.Marker = plot.TickerFunc(valueTicks)

	// Category 0 at the top: gonum puts y = 0 at the bottom.
	names := make([]string, n)
	for i, cat := range b.Categories {
		names[n-1-i] = shorten(cat, MaxLabelRunes)
	}
	p.NominalY(names...)
	grid := plotter.NewGrid()
	grid.Horizontal.Width = 0 // vertical lines only: at the value ticks
	grid.Vertical.Color = color.Gray{Y: 0xe8}
	p.Add(grid)

	legend := plot.NewLegend()
	legend.TextStyle = style(sans, 10)
	legend.Left = true
	legend.Top = true
	legend.XOffs = 12
	legend.ThumbnailWidth = 14

	maxV := 0.0
	for _, s := range b.Series {
		for _, v := range s.Values {
			if !math.IsNaN(v) {
				maxV = max(maxV, v)
			}
		}
	}
	if maxV == 0 {
		maxV = 1
	}
	p.X.Max = maxV * 1.02
	for j, s := range b.Series {
		vals := make(plotter.Values, n)
		xys := make(plotter.XYs, n)
		labels := make([]string, n)
		for i, v := range s.Values {
			row := n - 1 - i
			lbl := ""
			if s.Labels != nil {
				lbl = s.Labels[i]
			}
			if math.IsNaN(v) {
				v = 0
				lbl = "n/a"
			} else if lbl == "" {
				lbl = FormatValue(v)
			}
			vals[row] = v
			xys[row] = plotter.XY{X: v, Y: float64(row)}
			labels[row] = lbl
		}
		bar, err := plotter.NewBarChart(vals, barThickness)
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		bar.Horizontal = true
		bar.Color = Palette[j%len(Palette)]
		bar.LineStyle.Width = 0
		// Series 0 at the top of its group.
		bar.Offset = vg.Length(float64(k-1)/2-float64(j)) * barThickness
		p.Add(bar)
		lab, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		for i := range lab.TextStyle {
			lab.TextStyle[i] = style(sans, 8)
			lab.TextStyle[i].YAlign = draw.YCenter
		}
		lab.Offset = vg.Point{X: 3, Y: bar.Offset}
		p.Add(lab)
		legend.Add(shorten(s.Name, MaxLegendRunes), bar)
	}

	legendH := vg.Length(k)*16 + 16
	plotArea := draw.Crop(c, 6, -10, legendH, 0)
	c.SetColor(color.White)
	c.Fill(c.Rectangle.Path())
	p.Draw(plotArea)
	legend.Draw(draw.Crop(c, 0, 0, 4, -(c.Max.Y - c.Min.Y - legendH + 8)))
	return nil
}

// valueTicks are 5 to 11 labelled ticks at round steps (1, 2 or 5 × 10^k)
// from 0, labelled in the same short form as the bar values.
func valueTicks(lo, hi float64) []plot.Tick {
	if !(hi > lo) {
		return []plot.Tick{{Value: lo, Label: FormatValue(lo)}}
	}
	raw := (hi - lo) / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag // the largest round step <= raw: 5 to 11 ticks
	for _, m := range []float64{2, 5} {
		if m*mag <= raw {
			step = m * mag
		}
	}
	var ticks []plot.Tick
	start := math.Ceil(lo/step) * step
	for i := 0; i <= 20; i++ { // at most 11 steps fit by construction
		v := start + float64(i)*step
		if v > hi+step*1e-9 {
			break
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: FormatValue(v)})
	}
	return ticks
}

// FormatValue prints v with three significant digits and k/M/G suffixes:
// 0.0123, 4.56, 789, 12.3k, 4.57M.
func FormatValue(v float64) string {
	a := math.Abs(v)
	switch {
	case math.IsNaN(v):
		return "n/a"
	case a == 0:
		return "0"
	case a >= 1e9:
		return trimFloat(v/1e9) + "G"
	case a >= 1e6:
		return trimFloat(v/1e6) + "M"
	case a >= 1e4:
		return trimFloat(v/1e3) + "k"
	case a >= 100:
		return strconv.FormatFloat(math.Round(v), 'f', -1, 64)
	}
	return trimFloat(v)
}

// trimFloat prints three significant digits without trailing zeros.
func trimFloat(v float64) string {
	s := strconv.FormatFloat(v, 'g', 3, 64)
	if strings.Contains(s, "e") {
		f, _ := strconv.ParseFloat(s, 64)
		s = strconv.FormatFloat(f, 'f', -1, 64)
	}
	return s
}

// shorten cuts s to n runes, ending it with an ellipsis.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
