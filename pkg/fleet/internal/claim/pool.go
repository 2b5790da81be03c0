package claim

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
)

// PoolJudgement is what to do about a warm pool that is not yet Ready.
type PoolJudgement struct {
	// GiveUp: none of the pool can serve. Settle: some of it is Ready and
	// the rest never will be, so the pool serves with what is Ready. Both
	// false: wait, at most Recheck when it is not 0.
	GiveUp, Settle bool
	Recheck        time.Duration
	// Why is the worst trouble of the replicas given up, when any are.
	Why *Trouble
	// Ready and Lost count the replicas Ready and given up.
	Ready, Lost int
}

// Reason says in a line why a pool was given up or settled.
func (j PoolJudgement) Reason() string {
	if j.Why == nil {
		return "no replica is Ready"
	}
	return fmt.Sprintf("%d of its sandboxes cannot start: %s: %s", j.Lost, j.Why.Reason, j.Why.Message)
}

// PoolPatience judges a warm pool replica by replica: one replica in
// trouble — pending while an autoscaler adds a node, backing off a pull —
// does not sink the replicas that are Ready. Each Pod gets its own
// Patience.
type PoolPatience struct {
	Grace Grace
	pods  map[types.UID]*Patience
}

// Judge judges a pool that wants want replicas from its Pods, at now. A
// replica with no Pod yet is still to come.
func (pp *PoolPatience) Judge(pods []corev1.Pod, want int, now time.Time) PoolJudgement {
	if pp.pods == nil {
		pp.pods = map[types.UID]*Patience{}
	}
	seen := map[types.UID]bool{}
	var j PoolJudgement
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil {
			continue
		}
		seen[pod.UID] = true
		if kube.PodReady(pod) {
			j.Ready++
			continue
		}
		p := pp.pods[pod.UID]
		if p == nil {
			p = &Patience{Grace: pp.Grace}
			pp.pods[pod.UID] = p
		}
		t := Classify(pod)
		giveUp, recheck := p.Judge(t, now)
		switch {
		case giveUp:
			j.Lost++
			if j.Why == nil || t.Terminal && !j.Why.Terminal {
				j.Why = t
			}
		case recheck > 0 && (j.Recheck == 0 || recheck < j.Recheck):
			j.Recheck = recheck
		}
	}
	for uid := range pp.pods {
		if !seen[uid] {
			delete(pp.pods, uid)
		}
	}
	if j.Ready+j.Lost < want {
		return j
	}
	j.GiveUp, j.Settle = j.Ready == 0, j.Ready > 0 && j.Ready < want
	j.Recheck = 0
	return j
}
