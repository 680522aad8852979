package main

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Plot size: small PNGs, readable in a Markdown page.
const (
	plotW = 16 * vg.Centimeter
	plotH = 9 * vg.Centimeter
)

// writePlots draws every plot the results allow and returns their file
// names (relative to the output directory).
func (h *harness) writePlots() ([]string, error) {
	var files []string
	save := func(p *plot.Plot, name string) error {
		if err := p.Save(plotW, plotH, filepath.Join(h.out, name)); err != nil {
			return fmt.Errorf("plot %s: %w", name, err)
		}
		files = append(files, name)
		return nil
	}
	r := h.res
	if r.Latency != nil && len(r.Latency.Steps) > 0 {
		p, err := latencyPlot(r.Latency)
		if err != nil {
			return files, err
		}
		if err := save(p, "latency.png"); err != nil {
			return files, err
		}
	}
	if r.Throughput != nil && len(r.Throughput.Modes) > 0 {
		p, err := throughputPlot(r.Throughput, ms(h.plan.CeilingP99))
		if err != nil {
			return files, err
		}
		if err := save(p, "throughput.png"); err != nil {
			return files, err
		}
	}
	if r.Accuracy != nil {
		for _, c := range r.Accuracy.Cases {
			if c.Instances != 20 || (c.Case != "healthy" && c.Case != "outage") || c.Series == nil {
				continue
			}
			p, err := accuracyPlot(c)
			if err != nil {
				return files, err
			}
			if err := save(p, fmt.Sprintf("accuracy-%s-%d.png", c.Case, c.Instances)); err != nil {
				return files, err
			}
		}
	}
	if r.Outage != nil && r.Outage.Series != nil {
		p, err := outagePlot(r.Outage)
		if err != nil {
			return files, err
		}
		if err := save(p, "outage.png"); err != nil {
			return files, err
		}
	}
	return files, nil
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	return p
}

// latencyPlot: p50, p99, p99.9 bars, direct and through the gateway, per
// rate.
func latencyPlot(l *LatencyResult) (*plot.Plot, error) {
	p := newPlot("Latency: direct vs through one gateway", "offered rate", "latency (ms)")
	var names []string
	quant := []struct {
		name string
		get  func(*loadResult) float64
	}{{"p50", func(r *loadResult) float64 { return r.P50 }}, {"p99", func(r *loadResult) float64 { return r.P99 }}, {"p99.9", func(r *loadResult) float64 { return r.P999 }}}
	for _, s := range l.Steps {
		names = append(names, fmt.Sprintf("%d/s direct", s.Rate), fmt.Sprintf("%d/s gateway", s.Rate))
	}
	w := vg.Points(9)
	for qi, q := range quant {
		var vals plotter.Values
		for _, s := range l.Steps {
			vals = append(vals, q.get(s.Direct), q.get(s.Gateway))
		}
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return nil, err
		}
		b.Color = plotutil.Color(qi)
		b.LineStyle.Width = 0
		b.Offset = w * vg.Length(qi-1)
		p.Add(b)
		p.Legend.Add(q.name, b)
	}
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = 0.35
	p.X.Tick.Label.XAlign = draw.XRight
	p.X.Label.Text = ""
	return p, nil
}

// throughputPlot: p99 against the offered rate per limiter mode.
func throughputPlot(t *ThroughputResult, limitMs float64) (*plot.Plot, error) {
	p := newPlot("Throughput ceiling: p99 vs offered rate, one gateway", "offered rate (req/s)", "p99 latency (ms, log)")
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	maxRate := 0.0
	for i, m := range t.Modes {
		var xy plotter.XYs
		for _, s := range m.Steps {
			xy = append(xy, plotter.XY{X: float64(s.Load.Rate), Y: math.Max(s.Load.P99, 0.01)})
			maxRate = math.Max(maxRate, float64(s.Load.Rate))
		}
		if len(xy) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(xy)
		if err != nil {
			return nil, err
		}
		l.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
		pts.Shape = plotutil.Shape(i)
		p.Add(l, pts)
		p.Legend.Add(m.Mode, l, pts)
	}
	limit, err := plotter.NewLine(plotter.XYs{{X: 0, Y: limitMs}, {X: maxRate, Y: limitMs}})
	if err != nil {
		return nil, err
	}
	limit.Color = color.Gray{Y: 120}
	limit.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(limit)
	p.Legend.Add(fmt.Sprintf("p99 limit %.0fms", limitMs), limit)
	return p, nil
}

// accuracyPlot: cumulative admitted vs ideal over time.
func accuracyPlot(c AccuracyCase) (*plot.Plot, error) {
	title := fmt.Sprintf("Accuracy, %d instances on one bucket, %s", c.Instances, c.Case)
	p := newPlot(title, "time (s)", "admitted (cumulative)")
	// The curves rise to the top right and event labels sit at the top:
	// the bottom right is free.
	p.Legend.Top, p.Legend.Left = false, false
	s := c.Series
	var got, ideal plotter.XYs
	var sum int64
	for i := range s.Admitted {
		t := (float64(i) + 1) * s.Bin.Seconds()
		sum += s.Admitted[i]
		got = append(got, plotter.XY{X: t, Y: float64(sum)})
		ideal = append(ideal, plotter.XY{X: t, Y: s.Ideal[i]})
	}
	if len(got) == 0 {
		return p, nil
	}
	li, err := plotter.NewLine(ideal)
	if err != nil {
		return nil, err
	}
	li.Color = color.Gray{Y: 100}
	li.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	lg, err := plotter.NewLine(got)
	if err != nil {
		return nil, err
	}
	lg.Color = plotutil.Color(0)
	lg.Width = vg.Points(1.5)
	p.Add(li, lg)
	p.Legend.Add("ideal (capacity + rate × t)", li)
	p.Legend.Add("admitted", lg)
	if err := addEvents(p, s.Events, 0, got[len(got)-1].Y); err != nil {
		return nil, err
	}
	return p, nil
}

// outagePlot: p99 latency per 100ms through the outage.
func outagePlot(o *OutageResult) (*plot.Plot, error) {
	p := newPlot(fmt.Sprintf("Redis outage at %d req/s: p99 per %s", o.Rate, o.Series.Bin), "time (s)", "p99 latency (ms, log)")
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	var xy plotter.XYs
	top := 0.0
	for i, v := range o.Series.P99 {
		if v <= 0 {
			continue
		}
		xy = append(xy, plotter.XY{X: (float64(i) + 0.5) * o.Series.Bin.Seconds(), Y: v})
		top = math.Max(top, v)
	}
	if len(xy) == 0 {
		return p, nil
	}
	l, err := plotter.NewLine(xy)
	if err != nil {
		return nil, err
	}
	l.Color = plotutil.Color(0)
	p.Add(l)
	p.Legend.Add("gateway p99", l)
	if err := addEvents(p, o.Series.Events, 0.05, top); err != nil {
		return nil, err
	}
	return p, nil
}

// addEvents draws labelled vertical lines.
func addEvents(p *plot.Plot, events []event, y0, y1 float64) error {
	if y0 <= 0 {
		y0 = 0
	}
	var labels plotter.XYLabels
	for i, e := range events {
		x := e.At.Seconds()
		l, err := plotter.NewLine(plotter.XYs{{X: x, Y: math.Max(y0, 1e-3)}, {X: x, Y: y1}})
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i + 1)
		l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		p.Add(l)
		labels.XYs = append(labels.XYs, plotter.XY{X: x, Y: y1})
		labels.Labels = append(labels.Labels, e.Label)
	}
	if len(labels.XYs) == 0 {
		return nil
	}
	lb, err := plotter.NewLabels(labels)
	if err != nil {
		return err
	}
	p.Add(lb)
	return nil
}
