package webhook

import (
	"context"
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
	fleetlabels "github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

// FuzzCallCondition: whenever the API server would not call the webhook,
// the webhook would have changed and refused nothing; and the condition
// never fails to evaluate, which with failurePolicy Fail would refuse a
// Pod the webhook lets through.
func FuzzCallCondition(f *testing.F) {
	sets := callSets()
	names := slices.Sorted(maps.Keys(sets))
	for i, name := range names {
		pod := sandboxPod(func(p *corev1.Pod) { p.Labels[fleetlabels.RunID] = "run-1" })
		b, _ := json.Marshal(pod)
		f.Add(uint8(i), b)
		if _, err := Mutate(pod, sets[name], ""); err == nil {
			b, _ = json.Marshal(pod)
			f.Add(uint8(i), b)
		}
	}
	f.Add(uint8(0), []byte(`{"spec":{"containers":[{"image":"::bad::"}]}}`))
	f.Add(uint8(1), []byte(`{"metadata":{"labels":{"agents.x-k8s.io/sandbox-template-ref-hash":"x"}},"spec":{"affinity":{"podAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":1,"podAffinityTerm":{"topologyKey":""}}]}}}}`))
	// The security fields, on a Pod the sets leave as it is otherwise.
	for i, name := range names {
		for _, edit := range securityEdits {
			pod := compliantPod(f, sets[name])
			edit(pod)
			b, _ := json.Marshal(pod)
			f.Add(uint8(i), b)
		}
	}
	matchers := map[string]matchconditions.Matcher{}
	for _, name := range names {
		matchers[name] = callMatcher(f, CallCondition(sets[name]))
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		pod := &corev1.Pod{}
		if json.Unmarshal(data, pod) != nil {
			return
		}
		name := names[int(which)%len(names)]
		checkSkip(t, name, matchers[name], sets[name], pod, string(data))
	})
}

// FuzzCallConditionImage: FuzzCallCondition's property for a compliant
// Pod whose image is any string — the image checks fold prefixes and
// patterns into few regular expressions, and an image they let through
// must be one the webhook leaves as it is.
func FuzzCallConditionImage(f *testing.F) {
	sets := callSets()
	names := slices.Sorted(maps.Keys(sets))
	for _, s := range []string{"mirror.example.com/hub/a/b:1", "mirror.example.com/hub:1", "mirror.example.com/quay/x@sha256:" + sha,
		"docker.io/library/busybox:1.36", "docker.io/busybox:1", "quay.io/a:1", "mirror.example.com:5000/a:1"} {
		for i := range names {
			f.Add(uint8(i), s)
		}
	}
	matchers, pods := map[string]matchconditions.Matcher{}, map[string]*corev1.Pod{}
	for _, name := range names {
		matchers[name], pods[name] = callMatcher(f, CallCondition(sets[name])), compliantPod(f, sets[name])
	}
	f.Fuzz(func(t *testing.T, which uint8, image string) {
		name := names[int(which)%len(names)]
		pod := pods[name].DeepCopy()
		pod.Spec.Containers[0].Image = image
		checkSkip(t, name, matchers[name], sets[name], pod, "image "+image)
	})
}

// FuzzCanonicalImage: an image CanonicalImage matches is valid and, but
// for Docker Hub's short forms, normalises to itself.
func FuzzCanonicalImage(f *testing.F) {
	for _, s := range []string{"mirror.example.com/hub/a/b:1", "localhost:5000/a:latest", "a.b/c@sha256:" + sha, "docker.io/x/y:z", "a-b.c-d.e:1/f_g__h-i:J.k-l"} {
		f.Add(s)
	}
	re, short := regexp.MustCompile(CanonicalImage), regexp.MustCompile("^(?:"+DockerHubShortForms+")")
	f.Fuzz(func(t *testing.T, s string) {
		if !re.MatchString(s) {
			return
		}
		if n, err := images.Normalize(s); err != nil || n != s && !short.MatchString(s) {
			t.Errorf("%q matches but normalises to %q (%v)", s, n, err)
		}
	})
}

// compliantPod is a sandbox Pod from a template of a run as the set
// leaves it: the webhook has nothing to do for it.
func compliantPod(tb testing.TB, set Set) *corev1.Pod {
	tb.Helper()
	pod := sandboxPod(func(p *corev1.Pod) { p.Labels[fleetlabels.RunID] = "run-1" })
	if _, err := Mutate(pod, set, ""); err != nil {
		tb.Fatal(err)
	}
	return pod
}

// checkSkip fails t if the API server, judging pod by m, would not call
// the webhook, yet the webhook under the set named name would change or
// refuse it; input says what the fuzzer gave.
func checkSkip(t *testing.T, name string, m matchconditions.Matcher, set Set, pod *corev1.Pod, input string) {
	t.Helper()
	if calls(t, m, pod) {
		return
	}
	if changes, err := Mutate(pod, set, runIDOf(pod)); err != nil || len(changes) > 0 {
		t.Errorf("under %q the webhook is not called for %s, but it would change %v (%v)", name, input, changes, err)
	}
}

// BenchmarkCallCondition is what the API server spends judging a Pod
// from a template the webhook mutated, instead of calling the webhook:
// converting the Pod and the request for CEL and evaluating the
// condition — against the floor of any matchCondition, which converts
// them and evaluates a constant.
func BenchmarkCallCondition(b *testing.B) {
	set := callSets()["gvisor, colocation, scheduler, two policies"]
	attr := attributes(compliantPod(b, set))
	for _, bb := range []struct{ name, expr string }{{"policies", CallCondition(set)}, {"floor", "false"}} {
		m := callMatcher(b, bb.expr)
		b.Run(bb.name, func(b *testing.B) {
			for b.Loop() {
				if r := m.Match(context.Background(), attr, nil, nil); r.Error != nil || r.Matches {
					b.Fatalf("the compliant Pod is called for (%v)", r.Error)
				}
			}
		})
	}
}
