package serve

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// DefaultBodyBudget is how many bytes of call bodies serve holds at once,
// from every caller together: a call's message is held whole while it is
// decoded (up to maxMessage), and its decoding takes as much again, so
// this keeps what calls in flight cost well under the shipped
// Deployment's 1 GiB limit however many callers send large messages.
const DefaultBodyBudget = 192 << 20

// maxMessage is the largest message serve reads (Connect's read limit).
const maxMessage = 64 << 20

// bodyBudget bounds the bytes of call bodies held at once: a call is
// charged its Content-Length before it starts (refused as
// resource_exhausted if that is not left), and a body of unknown length
// as it is read; everything a call was charged is given back when it
// ends.
type bodyBudget struct {
	mu   sync.Mutex
	left int64
}

var errBudget = errors.New("serve is holding as many bytes of calls as it may")

func (b *bodyBudget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.left {
		return false
	}
	b.left -= n
	return true
}

func (b *bodyBudget) give(n int64) {
	b.mu.Lock()
	b.left += n
	b.mu.Unlock()
}

// charged is a body that charges the budget as it is read.
type charged struct {
	io.ReadCloser
	budget *bodyBudget
	taken  int64
}

func (c *charged) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	if n > 0 {
		if !c.budget.take(int64(n)) {
			return 0, errBudget
		}
		c.taken += int64(n)
	}
	return n, err
}

// withBudget refuses calls whose bodies the budget cannot hold.
func withBudget(max int64, next http.Handler) http.Handler {
	b := &bodyBudget{left: max}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := r.ContentLength; n > 0 {
			if n > maxMessage+5 || !b.take(n) {
				refuse(w, http.StatusTooManyRequests, "resource_exhausted", fmt.Sprintf(
					"a call of %d bytes: %v (%d MiB at once); retry it once calls in flight end", n, errBudget, max>>20))
				return
			}
			defer b.give(n)
			next.ServeHTTP(w, r)
			return
		}
		body := &charged{ReadCloser: r.Body, budget: b}
		r.Body = body
		defer func() { b.give(body.taken) }()
		next.ServeHTTP(w, r)
	})
}
