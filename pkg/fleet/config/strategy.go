package config

// A Strategy is a way a run warms its images' pools over time. Each is
// said here, once, by what it does; the engine's passes, the plan (and
// through serve's PlanRun the Python runner, which does what each window
// of the plan says) read it from here. A new strategy is a new entry of
// strategies.
type Strategy struct {
	Name string
	// Windows is how the images are grouped into windows, warmed
	// together, in run order.
	Windows Windowing
	// Ahead has the next window warm while one runs.
	Ahead bool
	// LetGo has a window's pools go once its tasks are done, so that no
	// more than a window (two with Ahead) is ever warm; see LetsGo.
	LetGo bool
	// OneReplica has each image's pool hold a single sandbox.
	OneReplica bool
}

// Windowing is how a strategy groups images into windows.
type Windowing int

const (
	// AllImages is one window of every image.
	AllImages Windowing = iota
	// OneImage is a window per image.
	OneImage
	// DiskSized windows hold as many images as the nodes' disk does at
	// once (windowSize, or the plan's sliding or, with Ahead, pipelined
	// window).
	DiskSized
)

var strategies = []Strategy{
	{Name: "none", Windows: OneImage, LetGo: true, OneReplica: true},
	{Name: "naive", Windows: AllImages},
	{Name: "sliding", Windows: DiskSized, LetGo: true},
	{Name: "pipelined", Windows: DiskSized, Ahead: true, LetGo: true},
}

// Strategies are the names of the ways a run warms pools over time.
var Strategies = func() []string {
	names := make([]string, len(strategies))
	for i, s := range strategies {
		names[i] = s.Name
	}
	return names
}()

// StrategyNamed is the strategy of that name.
func StrategyNamed(name string) (Strategy, bool) {
	for _, s := range strategies {
		if s.Name == name {
			return s, true
		}
	}
	return Strategy{}, false
}

// Warming is the configuration's strategy; a configuration that passed
// Validate names one.
func (f Fleet) Warming() Strategy {
	s, _ := StrategyNamed(f.Strategy)
	return s
}

// LetsGo says whether a run of windows windows lets each go once its
// tasks are done: under a strategy that does, when there are several. A
// single window keeps its pools — between epochs too — until the run
// ends.
func (s Strategy) LetsGo(windows int) bool { return s.LetGo && windows > 1 }
