// Command testimages writes the test images, and an image of the pinned
// Agent Sandbox controller, as docker-archive tarballs, for clusters that
// load images rather than pull them from the test registry (e2e/kind).
//
//	go run ./hack/testimages -controller .cache/testbin/current/bin/agent-sandbox-controller DIR
//	go run ./hack/testimages -print-controller-image
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testimages"
)

// ControllerImage is the name the Agent Sandbox controller image is saved under.
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
		fmt.Fprintln(os.Stderr, "usage: testimages [-cache DIR] [-controller BIN] OUTDIR")
		os.Exit(2)
	}
	if err := run(context.Background(), *cache, *controller, flag.Arg(0)); err != nil {
		fmt.Fprintf(os.Stderr, "testimages: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cache, controller, out string) error {
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
	paths, err := testimages.Save(out, images...)
	for _, p := range paths {
		fmt.Println(p)
	}
	return err
}
