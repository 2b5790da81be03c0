// Command image builds the container image of one of the project's
// commands (componentimage.Commands) without a Docker engine, and writes
// it as a docker archive (`make image`) or pushes it (`make push`).
//
//	go run ./hack/image -cmd asrl-webhook -tag ghcr.io/sandbox-fleet/asrl-webhook:v0.1.0 -out dist/asrl-webhook.tar [-arch arm64]
//	go run ./hack/image -cmd asrl-webhook -tag registry.example.com/sandbox-fleet/asrl-webhook:v0.1.0 -push
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandbox-fleet/sandbox-fleet/internal/componentimage"
)

func main() {
	o := componentimage.Options{Root: "."}
	var tag, out string
	var push bool
	flag.StringVar(&o.Command, "cmd", "asrl-webhook", "the command under cmd/ the image runs")
	flag.StringVar(&tag, "tag", "", "image reference (default ghcr.io/sandbox-fleet/CMD:dev)")
	flag.StringVar(&out, "out", "", "docker archive to write (default dist/CMD.tar)")
	flag.BoolVar(&push, "push", false, "push the image to -tag's registry instead of writing an archive (credentials from the docker config)")
	flag.StringVar(&o.Arch, "arch", "amd64", "GOARCH of the image")
	flag.StringVar(&o.LDFlags, "ldflags", "", "go build -ldflags")
	flag.Parse()
	if tag == "" {
		tag = "ghcr.io/sandbox-fleet/" + o.Command + ":dev"
	}
	if out == "" {
		out = filepath.Join("dist", o.Command+".tar")
	}
	img, err := componentimage.Build(o)
	if err == nil && push {
		err = componentimage.Push(context.Background(), tag, img)
	} else if err == nil {
		err = componentimage.WriteArchive(out, tag, img)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}
