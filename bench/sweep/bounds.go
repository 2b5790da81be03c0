package main

import (
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/bench/internal/swebench"
)

// bounds are what no placement of a sweep can beat, proven from its tasks
// and what its nodes hold at the start; a placement's ratios to them say
// how much is left to win.
type bounds struct {
	// wall: a node's slots start no task before the node has pulled the
	// image it lacks least of, and a slot runs one task at a time, so the
	// sweep lasts at least until the slots, each from its node's first
	// pull on, have had time for every task. Pulls after the first are
	// left out: they may hide behind running tasks.
	wall time.Duration
	// pulled: every layer of a task's image that no node holds at the
	// start is pulled at least once. A layer may well have to be pulled
	// onto several nodes, but how many depends on the grouping, which
	// this does not try to prove.
	pulled int64
}

// sweepBounds computes the bounds of running tasks, each for task on one
// of cpus slots a node, on nodes holding held at the start, pulling at
// bandwidth bytes a second each.
func sweepBounds(tasks []swebench.Image, held [][]swebench.Image, cpus int, task time.Duration, bandwidth float64) bounds {
	onSomeNode := map[string]bool{}
	first := make([]time.Duration, len(held))
	for n, images := range held {
		has := map[string]bool{}
		for _, img := range images {
			for _, l := range img.Layers {
				has[l.Digest], onSomeNode[l.Digest] = true, true
			}
		}
		least := int64(-1)
		for _, img := range tasks {
			var lacks int64
			for _, l := range img.Layers {
				if !has[l.Digest] {
					lacks += l.Size
				}
			}
			if least < 0 || lacks < least {
				least = lacks
			}
		}
		first[n] = time.Duration(float64(max(least, 0)) / bandwidth * float64(time.Second))
	}
	var b bounds
	counted := map[string]bool{}
	for _, img := range tasks {
		for _, l := range img.Layers {
			if !onSomeNode[l.Digest] && !counted[l.Digest] {
				counted[l.Digest] = true
				b.pulled += l.Size
			}
		}
	}
	// How many tasks the slots can finish by w.
	finished := func(w time.Duration) int {
		n := 0
		for _, f := range first {
			if w > f {
				n += cpus * int((w-f)/task)
			}
		}
		return n
	}
	lo, hi := time.Duration(0), time.Duration(0)
	for _, f := range first {
		hi = max(hi, f)
	}
	hi += time.Duration(len(tasks)) * task
	if len(held) == 0 || cpus == 0 || finished(hi) < len(tasks) {
		return b
	}
	for hi-lo > time.Millisecond {
		mid := lo + (hi-lo)/2
		if finished(mid) >= len(tasks) {
			hi = mid
		} else {
			lo = mid
		}
	}
	b.wall = hi
	return b
}
