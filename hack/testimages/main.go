// Command testimages pushes the test images, and an image of an Agent
// Sandbox controller tagged with its version, to a registry, under their
// own repository paths: for clusters whose nodes pull every registry's images from it, as
// the local cluster's real node does from the one it starts (e2e/kind).
//
//	go run ./hack/testimages -controller .cache/testbin/current/agent-sandbox/v1.0.1/bin/agent-sandbox-controller -controller-version v1.0.1 HOST:PORT
//	go run ./hack/testimages -controller-version v1.0.1 -print-controller-image
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testimages"
)

// controllerRepository is where the Agent Sandbox controller image is
// pushed, tagged with its version, as its releases are: preflight reads
// the version from the tag.
const controllerRepository = "sandbox-fleet.local/agent-sandbox-controller"

func main() {
	cache := flag.String("cache", ".cache/images", "layer cache directory")
	controller := flag.String("controller", "", "agent-sandbox-controller binary to package as "+controllerRepository+":VERSION")
	controllerVersion := flag.String("controller-version", "", "the version of the -controller binary, its image's tag")
	printController := flag.Bool("print-controller-image", false, "print the controller image's name and exit")
	flag.Parse()
	if (*controller != "" || *printController) && *controllerVersion == "" {
		fmt.Fprintln(os.Stderr, "testimages: -controller and -print-controller-image need -controller-version")
		os.Exit(2)
	}
	image := controllerRepository + ":" + *controllerVersion
	if *printController {
		fmt.Println(image)
		return
	}
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: testimages [-cache DIR] [-controller BIN -controller-version VERSION] REGISTRY (a plain-HTTP host:port)")
		os.Exit(2)
	}
	if err := run(context.Background(), *cache, *controller, image, flag.Arg(0)); err != nil {
		fmt.Fprintf(os.Stderr, "testimages: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cache, controller, controllerImage, registry string) error {
	b := &testimages.Builder{Dir: cache, Log: func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }}
	images, err := b.All(ctx)
	if err != nil {
		return err
	}
	if controller != "" {
		img, err := b.Binary(controllerImage, controller)
		if err != nil {
			return err
		}
		images = append(images, img)
	}
	return testimages.Push(ctx, registry, images...)
}
