package placement

import (
	"errors"
	"fmt"
	"testing"
)

// place puts pools of need replicas, one per image, through p and returns
// how many replicas each target ends with.
func place(t *testing.T, p Policy, targets []Target, images []string, need int) []int {
	t.Helper()
	for _, img := range images {
		i, err := p.Choose(img, need, targets)
		if err != nil {
			t.Fatal(err)
		}
		targets[i].Replicas += need
	}
	got := make([]int, len(targets))
	for i, tg := range targets {
		got[i] = tg.Replicas
	}
	return got
}

func images(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("img-%d", i)
	}
	return out
}

func TestPolicies(t *testing.T) {
	for _, tt := range []struct {
		policy  string
		targets []Target
		need    int
		want    []int
	}{
		{"round-robin", []Target{{Name: "a"}, {Name: "b"}, {Name: "c"}}, 1, []int{3, 3, 2}},
		{"round-robin", []Target{{Name: "a", MaxReplicas: 2}, {Name: "b"}}, 1, []int{2, 6}},
		{"least-loaded", []Target{{Name: "a", Replicas: 4}, {Name: "b"}}, 1, []int{6, 6}},
		{"capacity-weighted", []Target{{Name: "a", Weight: 1}, {Name: "b", Weight: 3}}, 1, []int{2, 6}},
		{"capacity-weighted", []Target{{Name: "a", Weight: 1}, {Name: "b", Weight: 1}}, 2, []int{8, 8}},
	} {
		got := place(t, mustNew(t, tt.policy), tt.targets, images(8), tt.need)
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%s over %+v: replicas %v, want %v", tt.policy, tt.targets, got, tt.want)
		}
	}
}

func TestLeastLoadedPrefersFewerClaims(t *testing.T) {
	i, err := LeastLoaded{}.Choose("x", 1, []Target{{Name: "a", Claims: 3}, {Name: "b", Claims: 1, Replicas: 9}, {Name: "c", Claims: 1, Replicas: 2}})
	if err != nil || i != 2 {
		t.Errorf("Choose = %d, %v; want c", i, err)
	}
}

func TestImageAffinity(t *testing.T) {
	targets := []Target{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	reversed := []Target{{Name: "c"}, {Name: "b"}, {Name: "a"}}
	spread := map[string]bool{}
	for _, img := range images(30) {
		i, err := ImageAffinity{}.Choose(img, 1, targets)
		if err != nil {
			t.Fatal(err)
		}
		j, _ := ImageAffinity{}.Choose(img, 1, reversed)
		again, _ := ImageAffinity{}.Choose(img, 1, targets)
		if targets[i].Name != reversed[j].Name || again != i {
			t.Errorf("%s maps to %s, then %s in another order, then %s", img, targets[i].Name, reversed[j].Name, targets[again].Name)
		}
		spread[targets[i].Name] = true
	}
	if len(spread) != 3 {
		t.Errorf("30 images used only %v", spread)
	}
	// A full affinity target falls back to the least loaded.
	img := images(1)[0]
	i, _ := ImageAffinity{}.Choose(img, 1, targets)
	full := []Target{{Name: "a", Replicas: 5}, {Name: "b", Replicas: 5}, {Name: "c", Replicas: 5}}
	full[i].MaxReplicas = 5
	full[(i+1)%3].Replicas = 1
	if j, err := (ImageAffinity{}).Choose(img, 1, full); err != nil || j != (i+1)%3 {
		t.Errorf("fallback chose %d, %v; want %d", j, err, (i+1)%3)
	}
}

func TestImageAffinityFollowsTheNodeCaches(t *testing.T) {
	const img = "docker.io/swebench/django-1:v1"
	lacking := func(bytes int64) map[string]int64 { return map[string]int64{img: bytes} }
	for _, tt := range []struct {
		name    string
		targets []Target
		want    string
	}{
		{"the pool whose node has the image", []Target{{Name: "a", Lacking: lacking(9 << 30)}, {Name: "b", Lacking: lacking(0)}, {Name: "c", Lacking: lacking(1 << 30)}}, "b"},
		{"a sibling's pool when none has it", []Target{{Name: "a", Lacking: lacking(9 << 30)}, {Name: "b", Lacking: lacking(300 << 20)}}, "b"},
		{"the least loaded of equals", []Target{{Name: "a", Lacking: lacking(0), Claims: 4}, {Name: "b", Lacking: lacking(0), Claims: 1}}, "b"},
		{"a full pool is passed over", []Target{{Name: "a", Lacking: lacking(9 << 30)}, {Name: "b", Lacking: lacking(0), MaxReplicas: 1, Replicas: 1}}, "a"},
		{"other images' signal is no signal: the hash decides", []Target{{Name: "a", Lacking: map[string]int64{"other:1": 0}}, {Name: "b"}}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			i, err := ImageAffinity{}.Choose(img, 1, tt.targets)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want
			if want == "" {
				bare := make([]Target, len(tt.targets))
				for k, tg := range tt.targets {
					bare[k] = Target{Name: tg.Name}
				}
				j, _ := ImageAffinity{}.Choose(img, 1, bare)
				want = bare[j].Name
			}
			if got := tt.targets[i].Name; got != want {
				t.Errorf("chose %s, want %s", got, want)
			}
		})
	}
}

func TestNoCapacity(t *testing.T) {
	for _, name := range []string{"round-robin", "least-loaded", "capacity-weighted", "image-affinity"} {
		_, err := mustNew(t, name).Choose("x", 3, []Target{{Name: "a", MaxReplicas: 4, Replicas: 2}})
		if !errors.Is(err, ErrNoCapacity) {
			t.Errorf("%s: %v, want ErrNoCapacity", name, err)
		}
	}
	if _, err := New("random"); err == nil {
		t.Error("unknown policy accepted")
	}
}

func mustNew(t *testing.T, name string) Policy {
	t.Helper()
	p, err := New(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
