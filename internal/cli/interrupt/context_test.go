package interrupt

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

func TestContextKeepsCancellationsErrorsOutOfTheTerminal(t *testing.T) {
	var out bytes.Buffer
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	if err := fs.Set("logtostderr", "false"); err != nil {
		t.Fatal(err)
	}
	klog.SetOutput(&out)
	t.Cleanup(func() {
		_ = fs.Set("logtostderr", "true")
		klog.SetOutput(nil)
	})

	ctx, cancel := Context(context.Background())
	logger := klog.FromContext(ctx).WithName("client-go").WithValues("verb", "GET")
	logger.Error(context.Canceled, "before the signal")
	cancel(errors.New("interrupted by interrupt"))
	logger.Error(fmt.Errorf("reading body: %w", context.Canceled), "Unexpected error when reading response body")
	logger.Error(errors.New("connection refused"), "a real failure")
	klog.Flush()

	got := out.String()
	for _, want := range []string{"before the signal", "a real failure", "context_test.go"} {
		if !strings.Contains(got, want) {
			t.Errorf("the log lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "Unexpected error when reading response body") {
		t.Errorf("an error the cancellation caused reached the terminal:\n%s", got)
	}
}
