package main

import (
	"fmt"
	"strings"
)

// num shows a figure to about two significant digits, whole above 10:
// 0.71, 2.7, 29, 157.
func num(v float64) string {
	switch {
	case v >= 10:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// ns shows a duration given in nanoseconds in the unit that keeps it
// between 1 and 1000: 2.0 µs, 157 µs, 5.3 ms.
func ns(v float64) string {
	switch {
	case v < 0:
		return "-" + ns(-v)
	case v >= 1e9:
		return num(v/1e9) + " s"
	case v >= 1e6:
		return num(v/1e6) + " ms"
	case v >= 1e3:
		return num(v/1e3) + " µs"
	default:
		return num(v) + " ns"
	}
}

// us shows a duration given in microseconds, as ns does.
func us(v float64) string { return ns(v * 1e3) }

// count shows a count, in thousands from 1000: 21, 6.5 k, 174 k.
func count(v float64) string {
	if v >= 1e3 {
		return num(v/1e3) + " k"
	}
	return num(v)
}

// whole shows a count of things: 3, 21.
func whole(v float64) string { return fmt.Sprintf("%.0f", v) }

// times shows a ratio: 0.19×, 1.34×, 151×.
func times(v float64) string {
	if v >= 10 {
		return num(v) + "×"
	}
	return fmt.Sprintf("%.2f×", v)
}

// pct shows a fraction as a whole percentage: 54 %.
func pct(v float64) string { return fmt.Sprintf("%.0f %%", v*100) }

// pval shows a U-test's p-value.
func pval(p float64) string { return fmt.Sprintf("p = %.3f", p) }

// mark is the target column's verdict on one target: met or missed.
func mark(met bool) string {
	if met {
		return "✓"
	}
	return "✗"
}

// row is one line of a figures table.
type row struct{ what, ours, peer, ratio, target string }

// table writes rows as a Markdown table under the header the docs use.
func table(rows []row) string {
	var b strings.Builder
	b.WriteString("| what | ours | side by side with | ratio | target |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		b.WriteString("|")
		for _, c := range []string{r.what, r.ours, r.peer, r.ratio, r.target} {
			if c != "" {
				b.WriteString(" " + c)
			}
			b.WriteString(" |")
		}
		b.WriteString("\n")
	}
	return b.String()
}
