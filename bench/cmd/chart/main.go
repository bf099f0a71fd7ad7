// Command chart draws the handoff latency distributions that
// BenchmarkHandoff writes with BENCH_SAMPLES=dir, as cumulative distributions
// on a log scale: runnerstate's Lock beside the kernel's own blocking flock
// (the floor) and gofrs/flock polling every 10 ms.
//
//	cd bench && mkdir -p samples && BENCH_SAMPLES=samples go test -run '^$' -bench Handoff -benchtime 300x
//	go run ./cmd/chart -in samples -out handoff.png
package main

import (
	"bufio"
	"flag"
	"fmt"
	"image/color"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

func main() {
	in := flag.String("in", "samples", "directory of handoff-*.txt sample files (nanoseconds, one per line)")
	out := flag.String("out", "handoff.png", "the PNG to write")
	flag.Parse()

	p := plot.New()
	p.Title.Text = "Cross-process lock handoff latency (holder releases -> waiter returns)"
	p.X.Label.Text = "latency (µs, log scale)"
	p.Y.Label.Text = "fraction of handoffs at or below"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())
	series := []struct {
		file, name string
		c          color.RGBA
	}{
		{"handoff-flock-blocking.txt", "blocking flock(2) (floor)", color.RGBA{0x55, 0x55, 0x55, 0xff}},
		{"handoff-runnerstate.txt", "runnerstate Lock", color.RGBA{0x1f, 0x77, 0xb4, 0xff}},
		{"handoff-gofrs-poll-10ms.txt", "gofrs/flock TryLockContext, 10 ms poll", color.RGBA{0xd6, 0x27, 0x28, 0xff}},
	}
	for _, s := range series {
		xs, err := load(filepath.Join(*in, s.file))
		if err != nil {
			log.Fatal(err)
		}
		slices.Sort(xs)
		pts := make(plotter.XYs, len(xs))
		for i, x := range xs {
			pts[i] = plotter.XY{X: x, Y: float64(i+1) / float64(len(xs))}
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			log.Fatal(err)
		}
		line.Color = s.c
		line.Width = vg.Points(2)
		p.Add(line)
		p.Legend.Add(fmt.Sprintf("%s (p50 %.0f µs)", s.name, xs[len(xs)/2]), line)
	}
	p.Legend.Top = false
	p.Legend.Left = false
	p.Legend.XOffs = -vg.Points(170)
	p.Legend.YOffs = vg.Points(60)
	if err := p.Save(9*vg.Inch, 4.5*vg.Inch, *out); err != nil {
		log.Fatal(err)
	}
}

// load reads one sample per line, in nanoseconds, and returns microseconds.
func load(path string) ([]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var xs []float64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		ns, err := strconv.ParseFloat(sc.Text(), 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		xs = append(xs, max(ns/1e3, 0.1))
	}
	if len(xs) == 0 {
		return nil, fmt.Errorf("%s: no samples", path)
	}
	return xs, sc.Err()
}
