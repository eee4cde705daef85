package chart

import (
	"bytes"
	"encoding/xml"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot/vg"
)

func sample() Bars {
	return Bars{
		Title:      "Average time per syscall",
		ValueLabel: "average time (µs)",
		Categories: []string{"openat", "write", "fsync", "close", "renameat"},
		Series: []Series{
			{Name: "1 sender × 1 dir", Values: []float64{12, 5, 400, 2, 30}},
			{Name: "10 senders × 1 dir", Values: []float64{120, 6, 4000, 3, 300}},
			{Name: "10 senders × 10 dirs", Values: []float64{20, math.NaN(), 1400, 3, 40}},
		},
	}
}

// SVGTexts parses an SVG document with encoding/xml and returns the text of
// its <text> elements; it fails the test if the document is not well-formed
// or its root is not <svg>.
func svgTexts(t *testing.T, data []byte) []string {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	var texts []string
	var root string
	inText := 0
	var cur strings.Builder
	for range 1 << 20 {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = el.Name.Local
			}
			if el.Name.Local == "text" {
				inText++
				cur.Reset()
			}
		case xml.CharData:
			if inText > 0 {
				cur.Write(el)
			}
		case xml.EndElement:
			if el.Name.Local == "text" {
				inText--
				texts = append(texts, cur.String())
			}
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
	return texts
}

func TestSVGIsValidAndLabelled(t *testing.T) {
	b := sample()
	var buf bytes.Buffer
	if err := b.Render(&buf, SVG); err != nil {
		t.Fatal(err)
	}
	texts := strings.Join(svgTexts(t, buf.Bytes()), "|")
	for _, want := range []string{"Average time per syscall", "average time (µs)", "fsync", "renameat",
		"10 senders × 10 dirs", "4000", "1400", "n/a"} {
		if !strings.Contains(texts, want) {
			t.Errorf("SVG texts lack %q: %s", want, texts)
		}
	}
}

func TestPNGDecodes(t *testing.T) {
	b := sample()
	path := filepath.Join(t.TempDir(), "c.png")
	if err := b.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	}()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("PNG does not decode: %v", err)
	}
	w, h := b.Size()
	if got, want := img.Bounds().Dx(), int(w.Dots(pngDPI)+0.5); got != want {
		t.Errorf("PNG width %d px, want %d", got, want)
	}
	if got, want := img.Bounds().Dy(), int(h.Dots(pngDPI)+0.5); got != want {
		t.Errorf("PNG height %d px, want %d", got, want)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left: %v", err)
	}
}

func TestHeightGrowsWithBars(t *testing.T) {
	small := sample()
	big := sample()
	big.Categories = append(big.Categories, "unlinkat", "fdatasync")
	for i := range big.Series {
		big.Series[i].Values = append(big.Series[i].Values, 1, 2)
	}
	_, hs := small.Size()
	_, hb := big.Size()
	if hb <= hs {
		t.Errorf("7 categories: height %v, not above 5 categories' %v", hb, hs)
	}
	perBar := (hb - hs) / 2 / vg.Length(len(big.Series))
	if perBar < barThickness {
		t.Errorf("%v points per bar, want at least the bar thickness %v", perBar, barThickness)
	}
}

func TestRejectsBadInput(t *testing.T) {
	cases := map[string]func(b *Bars){
		"no categories":  func(b *Bars) { b.Categories = nil },
		"no series":      func(b *Bars) { b.Series = nil },
		"short series":   func(b *Bars) { b.Series[1].Values = b.Series[1].Values[:2] },
		"negative value": func(b *Bars) { b.Series[0].Values[0] = -1 },
		"infinite value": func(b *Bars) { b.Series[0].Values[0] = math.Inf(1) },
		"short labels":   func(b *Bars) { b.Series[0].Labels = []string{"x"} },
		"too many series": func(b *Bars) {
			for len(b.Series) <= MaxSeries {
				b.Series = append(b.Series, b.Series[0])
			}
		},
	}
	for name, mutate := range cases {
		b := sample()
		mutate(&b)
		if err := b.Render(io.Discard, SVG); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	b := sample()
	if err := b.Render(io.Discard, "gif"); err == nil {
		t.Error("format gif accepted")
	}
	if err := b.WriteFile(filepath.Join(t.TempDir(), "c.txt")); err == nil {
		t.Error(".txt accepted")
	}
}

func TestCustomLabelsAndLongNames(t *testing.T) {
	b := Bars{
		Title:      "ops/s, % of run A",
		Categories: []string{strings.Repeat("x", 100)},
		Series: []Series{
			{Name: "A", Values: []float64{100}, Labels: []string{"8,694/s"}},
			{Name: "B", Values: []float64{0}},
		},
	}
	var buf bytes.Buffer
	if err := b.Render(&buf, SVG); err != nil {
		t.Fatal(err)
	}
	texts := strings.Join(svgTexts(t, buf.Bytes()), "|")
	if !strings.Contains(texts, "8,694/s") {
		t.Errorf("custom label missing: %s", texts)
	}
	if strings.Contains(texts, strings.Repeat("x", 100)) || !strings.Contains(texts, strings.Repeat("x", MaxLabelRunes-1)+"…") {
		t.Errorf("long category not shortened: %s", texts)
	}
}

func TestFormatValue(t *testing.T) {
	for v, want := range map[float64]string{
		0: "0", 0.0123: "0.0123", 4.56: "4.56", 45.6: "45.6", 789.4: "789", 9999: "9999",
		12345: "12.3k", 4567890: "4.57M", 2.5e9: "2.5G", 1e-7: "0.0000001", math.NaN(): "n/a",
	} {
		if got := FormatValue(v); got != want {
			t.Errorf("FormatValue(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestValueTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   string
	}{
		{0, 2.67, "0 0.5 1 1.5 2 2.5"},
		{0, 6.3, "0 1 2 3 4 5 6"},
		{0, 4080, "0 500 1000 1500 2000 2500 3000 3500 4000"},
		{0, 102, "0 20 40 60 80 100"},
		{0, 0.0102, "0 0.002 0.004 0.006 0.008 0.01"},
		{1, 1, "1"},
	} {
		var got []string
		for _, tk := range valueTicks(tc.lo, tc.hi) {
			got = append(got, tk.Label)
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("ticks(%v, %v) = %q, want %q", tc.lo, tc.hi, got, tc.want)
		}
	}
}
