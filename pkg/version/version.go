// Package version reports which build of sandbox-fleet is running.
package version

import (
	"runtime"
	"runtime/debug"
)

// These are set at link time by the Makefile (-X). A binary built by
// `go install module@version` has none of them set; Get then falls back to the
// module version and VCS data the Go toolchain records.
var (
	gitVersion = ""
	gitCommit  = ""
	buildDate  = ""
)

// Info describes one build.
type Info struct {
	GitVersion string `json:"gitVersion"`
	GitCommit  string `json:"gitCommit,omitempty"`
	BuildDate  string `json:"buildDate,omitempty"`
	GoVersion  string `json:"goVersion"`
	Platform   string `json:"platform"`
}

// Get returns the running binary's version.
func Get() Info {
	info := Info{
		GitVersion: gitVersion,
		GitCommit:  gitCommit,
		BuildDate:  buildDate,
		GoVersion:  runtime.Version(),
		Platform:   runtime.GOOS + "/" + runtime.GOARCH,
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if info.GitVersion == "" && bi.Main.Version != "" {
			info.GitVersion = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && info.GitCommit == "":
				info.GitCommit = s.Value
			case s.Key == "vcs.time" && info.BuildDate == "":
				info.BuildDate = s.Value
			}
		}
	}
	if info.GitVersion == "" {
		info.GitVersion = "(devel)"
	}
	return info
}
