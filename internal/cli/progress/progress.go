// Package progress shows a run's progress: one line rewritten in place on
// a terminal, plain periodic log lines otherwise, so piped output never
// carries control characters.
package progress

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
)

// Line renders a progress snapshot: tasks done of total, failures, tasks in
// flight, a controller that is down, images warming, bytes pulling, rate and the time left at that
// rate.
func Line(p fleet.Progress) string {
	line := fmt.Sprintf("tasks %d/%d", p.Done, p.Total)
	if p.Failed > 0 {
		line += fmt.Sprintf(" (%d failed)", p.Failed)
	}
	line += fmt.Sprintf(" · running %d", p.Running)
	if p.ControllerDown > 0 {
		line += fmt.Sprintf(" · Agent Sandbox controller down %s", p.ControllerDown.Round(time.Second))
	}
	if p.Warming > 0 {
		line += fmt.Sprintf(" · warming %d images", p.Warming)
	}
	if p.Pulling.Done < p.Pulling.Size {
		line += " · " + p.Pulling.String()
	}
	if secs := p.Elapsed.Seconds(); p.Done > 0 && secs > 0 {
		rate := float64(p.Done) / secs
		line += fmt.Sprintf(" · %.1f/s", rate)
		if left := p.Total - p.Done; left > 0 {
			line += " · ETA " + time.Duration(float64(left)/rate*float64(time.Second)).Round(time.Second).String()
		}
	}
	return line + " · " + p.Elapsed.Round(time.Second).String()
}

// Printer shows progress on w until Stop.
type Printer struct {
	w        io.Writer
	terminal bool
	read     func() fleet.Progress
	stop     chan struct{}
	done     sync.WaitGroup
}

// Start shows read's progress on w: every 250ms in place when terminal is
// true, every interval as a line of its own otherwise.
func Start(w io.Writer, terminal bool, interval time.Duration, read func() fleet.Progress) *Printer {
	p := &Printer{w: w, terminal: terminal, read: read, stop: make(chan struct{})}
	every := interval
	if terminal {
		every = 250 * time.Millisecond
	}
	p.done.Go(func() {
		ticker := time.NewTicker(every)
		defer ticker.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-ticker.C:
				p.show()
			}
		}
	})
	return p
}

func (p *Printer) show() {
	if p.terminal {
		// Carriage return and erase-line rewrite the line in place.
		fmt.Fprintf(p.w, "\r\033[K%s", Line(p.read()))
		return
	}
	fmt.Fprintf(p.w, "%s %s\n", time.Now().Format(time.TimeOnly), Line(p.read()))
}

// Stop shows the final state and ends the line.
func (p *Printer) Stop() {
	close(p.stop)
	p.done.Wait()
	p.show()
	if p.terminal {
		fmt.Fprintln(p.w)
	}
}
