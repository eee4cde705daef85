package report

import (
	"fmt"
	"math"
)

// sample is the repeated measurements of one figure.
type sample []float64

func (s sample) mean() float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	var t float64
	for _, v := range s {
		t += v
	}
	return t / float64(len(s))
}

// variance is the unbiased sample variance (NaN below two values).
func (s sample) variance() float64 {
	if len(s) < 2 {
		return math.NaN()
	}
	m := s.mean()
	var t float64
	for _, v := range s {
		t += (v - m) * (v - m)
	}
	return t / float64(len(s)-1)
}

// tCrit95 is the two-sided 95% critical value of Student's t for df
// degrees of freedom (df rounded down; conservative between rows).
func tCrit95(df float64) float64 {
	table := []float64{0, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086}
	switch {
	case math.IsNaN(df) || df < 1:
		return math.Inf(1)
	case df < float64(len(table)):
		return table[int(df)]
	case df < 30:
		return 2.086
	case df < 60:
		return 2.042
	case df < 120:
		return 2.000
	}
	return 1.960
}

// Verdicts of a comparison of one figure between two sides.
const (
	VerdictBetter = "better"
	VerdictWorse  = "worse"
	VerdictSame   = "same within noise"
	VerdictSingle = "single run"
)

// verdict compares sample b with reference a by Welch's t-test at 95%:
// with at least two values on each side, a difference whose confidence
// interval excludes zero is better or worse (by higherBetter), else the
// same within noise; with fewer values there is no noise estimate and the
// verdict is VerdictSingle. half is the half-width of the interval of the
// difference, relative to a's mean (NaN without one).
func verdict(a, b sample, higherBetter bool) (v string, half float64) {
	if len(a) < 2 || len(b) < 2 {
		return VerdictSingle, math.NaN()
	}
	ma, mb := a.mean(), b.mean()
	va, vb := a.variance()/float64(len(a)), b.variance()/float64(len(b))
	se := math.Sqrt(va + vb)
	d := mb - ma
	if se == 0 {
		if d == 0 {
			return VerdictSame, 0
		}
	} else {
		df := (va + vb) * (va + vb) / (va*va/float64(len(a)-1) + vb*vb/float64(len(b)-1))
		h := tCrit95(df) * se
		half = math.Abs(h / ma)
		if math.Abs(d) <= h {
			return VerdictSame, half
		}
	}
	if (d > 0) == higherBetter {
		return VerdictBetter, half
	}
	return VerdictWorse, half
}

// fmtSample prints a sample's mean, with its spread when repeated.
func fmtSample(s sample) string {
	switch len(s) {
	case 0:
		return "—"
	case 1:
		return fmtNum(s[0])
	}
	return fmt.Sprintf("%s ± %s (n=%d)", fmtNum(s.mean()), fmtNum(math.Sqrt(s.variance())), len(s))
}
