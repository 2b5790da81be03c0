// Package interrupt gives the verbs that create things in a cluster one
// way to be stopped: the first SIGINT or SIGTERM cancels the verb's work,
// which then cleans up after itself; a second exits at once, saying what
// is left and how to remove it.
package interrupt

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Handle starts listening for the signals. On the first it writes
// "SIGNAL: stopping" to w and cancels with the signal as the cause; on the
// second it writes what left returns and exits with 130. stop ends the
// listening.
func Handle(w io.Writer, cancel context.CancelCauseFunc, stopping string, left func() string) (stop func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	watchParent(done)
	go func() {
		select {
		case s := <-sigs:
			fmt.Fprintf(w, "\n%s: %s; send it again to exit at once\n", s, stopping)
			cancel(fmt.Errorf("interrupted by %s", s))
		case <-done:
			return
		}
		select {
		case s := <-sigs:
			fmt.Fprintf(w, "%s again: exiting without cleaning up; %s\n", s, left())
			os.Exit(130)
		case <-done:
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
	}
}
