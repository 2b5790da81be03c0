package serve

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// The budget admits calls while their bodies fit, refuses the rest as
// resource_exhausted before they start, and gets every byte back when a
// call ends; a body of unknown length is charged as it is read.
func TestBodyBudget(t *testing.T) {
	release := make(chan struct{})
	var started sync.WaitGroup
	h := withBudget(100, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Header.Get("Hold") != "" {
			started.Done()
			<-release
		}
	}))
	call := func(body string, known bool, hold bool) *httptest.ResponseRecorder {
		var r *http.Request
		if known {
			r = httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		} else {
			r = httptest.NewRequest(http.MethodPost, "/", io.MultiReader(strings.NewReader(body)))
			r.ContentLength = -1
		}
		if hold {
			r.Header.Set("Hold", "1")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	// Two calls of 40 bytes are held; a third of 40 does not fit.
	started.Add(2)
	held := make(chan *httptest.ResponseRecorder, 2)
	for range 2 {
		go func() { held <- call(strings.Repeat("x", 40), true, true) }()
	}
	started.Wait()
	if w := call(strings.Repeat("x", 40), true, false); w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), "resource_exhausted") {
		t.Errorf("a call past the budget: %d %s", w.Code, w.Body)
	}
	if w := call(strings.Repeat("x", 20), true, false); w.Code != http.StatusOK {
		t.Errorf("a call that fits: %d %s", w.Code, w.Body)
	}
	close(release)
	for range 2 {
		if w := <-held; w.Code != http.StatusOK {
			t.Errorf("a held call: %d", w.Code)
		}
	}
	// Everything was given back: a call of the whole budget fits.
	if w := call(strings.Repeat("x", 100), true, false); w.Code != http.StatusOK {
		t.Errorf("the whole budget after the calls ended: %d %s", w.Code, w.Body)
	}
	// Unknown length: charged as read; past the budget the read fails.
	var readErr error
	h2 := withBudget(100, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, readErr = io.Copy(io.Discard, r.Body)
	}))
	r := httptest.NewRequest(http.MethodPost, "/", io.MultiReader(bytes.NewReader(make([]byte, 150))))
	r.ContentLength = -1
	h2.ServeHTTP(httptest.NewRecorder(), r)
	if readErr != errBudget {
		t.Errorf("reading 150 bytes of unknown length within 100: %v, want %v", readErr, errBudget)
	}
	if w := call("", true, false); w.Code != http.StatusOK {
		t.Errorf("an empty call: %d", w.Code)
	}
}
