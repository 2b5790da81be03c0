// Command testimages pushes the test images, and an image of the pinned
// Agent Sandbox controller, to a registry, under their own repository
// paths: for clusters whose nodes pull every registry's images from it, as
// the local cluster's real node does from the one it starts (e2e/kind).
//
//	go run ./hack/testimages -controller .cache/testbin/current/bin/agent-sandbox-controller HOST:PORT
//	go run ./hack/testimages -print-controller-image
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testimages"
)

// ControllerImage is the name the Agent Sandbox controller image is pushed under.
const ControllerImage = "sandbox-fleet.local/agent-sandbox-controller:v0.5.6"

func main() {
	cache := flag.String("cache", ".cache/images", "layer cache directory")
	controller := flag.String("controller", "", "agent-sandbox-controller binary to package as "+ControllerImage)
	printController := flag.Bool("print-controller-image", false, "print the controller image's name and exit")
	flag.Parse()
	if *printController {
		fmt.Println(ControllerImage)
		return
	}
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: testimages [-cache DIR] [-controller BIN] REGISTRY (a plain-HTTP host:port)")
		os.Exit(2)
	}
	if err := run(context.Background(), *cache, *controller, flag.Arg(0)); err != nil {
		fmt.Fprintf(os.Stderr, "testimages: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cache, controller, registry string) error {
	b := &testimages.Builder{Dir: cache, Log: func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }}
	images, err := b.All(ctx)
	if err != nil {
		return err
	}
	if controller != "" {
		img, err := b.Binary(ControllerImage, controller)
		if err != nil {
			return err
		}
		images = append(images, img)
	}
	return testimages.Push(ctx, registry, images...)
}
