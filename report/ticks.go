package report

import (
	"math"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
)

// niceTicks puts major ticks at multiples of 1, 2 or 5 times a power of
// ten, the smallest such step that gives at most maxMajor intervals, with
// labels that have as many decimals as the step needs and no more. The
// first and last ticks lie at or beyond the data, so that an axis that
// rescales to its ticks starts and ends on a label.
type niceTicks struct{}

// maxMajor is the most intervals between labelled ticks: more crowd an
// 8-inch axis with labels like 0.0015.
const maxMajor = 6

func (niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		return []plot.Tick{{Value: lo, Label: strconv.FormatFloat(lo, 'g', 6, 64)}}
	}
	m, e, first, last := niceStep(lo, hi)
	step := float64(m) * math.Pow10(e)
	sci := e < -4 || math.Max(math.Abs(lo), math.Abs(hi)) >= 1e6
	minors := 5 // minor ticks per major step: 1 → 0.2, 5 → 1
	if m == 2 {
		minors = 4 // 2 → 0.5
	}
	var ticks []plot.Tick
	for k := first; k <= last; k++ {
		ticks = append(ticks, plot.Tick{Value: float64(k) * step, Label: label(k*int64(m), e, sci)})
		for j := 1; j < minors && k < last; j++ {
			ticks = append(ticks, plot.Tick{Value: (float64(k) + float64(j)/float64(minors)) * step})
		}
	}
	return ticks
}

// niceStep is the tick step for [lo, hi], m × 10^e with m 1, 2 or 5: the
// smallest whose ticks from the one at or below lo (first × step) to the
// one at or above hi (last × step) make at most maxMajor intervals.
func niceStep(lo, hi float64) (m, e int, first, last int64) {
	e = int(math.Floor(math.Log10((hi - lo) / maxMajor)))
	for {
		for _, m := range []int{1, 2, 5} {
			step := float64(m) * math.Pow10(e)
			first, last := int64(math.Floor(lo/step+1e-9)), int64(math.Ceil(hi/step-1e-9))
			if last-first <= maxMajor {
				return m, e, first, last
			}
		}
		e++
	}
}

// label writes n × 10^e exactly: in decimals when e < 0 (0.0015), or
// in scientific form when sci (1.5e-5, 2e6), never with float noise.
func label(n int64, e int, sci bool) string {
	if n == 0 {
		return "0"
	}
	if !sci {
		s := strconv.FormatFloat(float64(n)*math.Pow10(e), 'f', max(0, -e), 64)
		if strings.Contains(s, ".") { // 0.0010 → 0.001: a 1-2-5 step reads best short
			s = strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
		}
		return s
	}
	sign := ""
	if n < 0 {
		sign, n = "-", -n
	}
	digits := strconv.FormatInt(n, 10)
	exp := e + len(digits) - 1
	mant := digits[:1]
	if rest := strings.TrimRight(digits[1:], "0"); rest != "" {
		mant += "." + rest
	}
	return sign + mant + "e" + strconv.Itoa(exp)
}

// pow2Ticks marks a log axis at powers of two, as dynamic loss scales
// move, every k-th power labelled when more than maxMajor+1 would be, the
// first and last ticks at or beyond the data. Labels are integers (65536)
// when every labelled power is from 1 to 2^19, else all 2^e.
type pow2Ticks struct{}

func (pow2Ticks) Ticks(lo, hi float64) []plot.Tick {
	if !(lo > 0) || !(hi >= lo) || math.IsInf(hi, 0) {
		return nil
	}
	first, last := int(math.Floor(math.Log2(lo))), int(math.Ceil(math.Log2(hi)))
	if first == last {
		last++
	}
	// labelled powers are multiples of every, the first and last among
	// them: at most maxMajor+1 labels
	every := 1
	for (-floorTo(-last, every)-floorTo(first, every))/every > maxMajor {
		every++
	}
	first, last = floorTo(first, every), -floorTo(-last, every)
	integers := first >= 0 && last < 20
	var ticks []plot.Tick
	for p := first; p <= last; p++ {
		t := plot.Tick{Value: math.Ldexp(1, p)}
		switch {
		case p%every != 0:
		case integers:
			t.Label = strconv.FormatInt(1<<p, 10)
		default:
			t.Label = "2^" + strconv.Itoa(p)
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// floorTo is the largest multiple of k at most n (k > 0, n of any sign).
func floorTo(n, k int) int {
	return n - ((n%k)+k)%k
}
