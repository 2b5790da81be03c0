package kube

import (
	"net/http"
	"sync/atomic"
)

// Requests counts the HTTP requests every client of one Clients sends —
// reads, writes, watch and exec upgrades alike — so that a load test can
// say what a task costs the API server.
type Requests struct{ n atomic.Int64 }

// Count returns the requests sent so far.
func (r *Requests) Count() int64 { return r.n.Load() }

// wrap counts each round trip of rt.
func (r *Requests) wrap(rt http.RoundTripper) http.RoundTripper {
	return countingTransport{next: rt, requests: r}
}

type countingTransport struct {
	next     http.RoundTripper
	requests *Requests
}

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.requests.n.Add(1)
	return t.next.RoundTrip(req)
}
