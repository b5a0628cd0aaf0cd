package bench

import (
	"errors"
	"fmt"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Plot draws the latency phase, per-token latency (p50, p99) against load,
// for foundryq and the bare reader, to a PNG (or SVG, PDF: by file name)
// at path.
func Plot(rep Report, path string) error {
	pts := rep.Latency.Points
	if len(pts) == 0 {
		return errors.New("loadtest: plot: no latency figures")
	}
	p := plot.New()
	p.Title.Text = "foundryq: token latency against load (emulator emit to receive)"
	p.X.Label.Text = "load, tokens/s (all runs)"
	p.Y.Label.Text = "latency per token, ms"
	series := func(pick func(LatencyPoint) float64) plotter.XYs {
		xys := make(plotter.XYs, len(pts))
		for i, pt := range pts {
			xys[i].X, xys[i].Y = pt.OfferedPerSec, pick(pt)
		}
		return xys
	}
	if err := plotutil.AddLinePoints(p,
		"foundryq p99", series(func(pt LatencyPoint) float64 { return pt.Foundryq.P99 }),
		"foundryq p50", series(func(pt LatencyPoint) float64 { return pt.Foundryq.P50 }),
		"bare reader p99", series(func(pt LatencyPoint) float64 { return pt.Reader.P99 }),
		"bare reader p50", series(func(pt LatencyPoint) float64 { return pt.Reader.P50 }),
	); err != nil {
		return fmt.Errorf("loadtest: plot: %w", err)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Y.Min = 0
	p.X.Min = 0
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("loadtest: plot: %w", err)
	}
	return nil
}
