// Package warm fills a run's warm pools. Asking the Agent Sandbox controller
// for every replica at once (tens of thousands with warm-per-task over many
// images) bursts the controller and the API server, so pools fill in waves
// of at most a budget of sandbox creates, each wave waiting for its
// sandboxes to be Ready before the next starts.
package warm

// Step raises one pool to a replica count.
type Step struct {
	Pool     int // index into the pools being warmed
	Replicas int32
}

// Waves plans the fill of pools with the given final replica counts: each
// wave adds at most budget replicas in all, pools in order, and a pool
// larger than what a wave has left grows over several waves. A budget of 0
// or less fills everything in one wave.
func Waves(replicas []int32, budget int) [][]Step {
	total := 0
	for _, r := range replicas {
		total += int(r)
	}
	if budget <= 0 || budget >= total {
		wave := make([]Step, 0, len(replicas))
		for i, r := range replicas {
			wave = append(wave, Step{Pool: i, Replicas: r})
		}
		return [][]Step{wave}
	}
	var waves [][]Step
	var wave []Step
	left := budget
	for i, r := range replicas {
		var have int32
		for have < r {
			add := min(r-have, int32(left))
			have += add
			left -= int(add)
			wave = append(wave, Step{Pool: i, Replicas: have})
			if left == 0 {
				waves = append(waves, wave)
				wave, left = nil, budget
			}
		}
	}
	if len(wave) > 0 {
		waves = append(waves, wave)
	}
	return waves
}
