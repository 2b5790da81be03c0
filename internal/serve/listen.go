package serve

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandbox-fleet/sandbox-fleet/api/fleet/v1/fleetv1connect"
)

// Access says where and how the API is served.
type Access struct {
	// Address is unix:///path (or a path) for a unix socket, or host:port.
	// A host other than loopback needs Token.
	Address string
	// Token, when set, is the bearer token every call must carry.
	Token string
	// CertFile and KeyFile, when set, serve TLS.
	CertFile, KeyFile string
}

// Listen checks a and opens its listener. A unix socket is made mode 0600
// in a directory only its owner may enter; TCP is on loopback unless a
// token guards it.
func Listen(a Access) (net.Listener, string, error) {
	if path, ok := unixPath(a.Address); ok {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, "", fmt.Errorf("--listen %s: %w", a.Address, err)
		}
		if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
			// A socket left by a server that died; nothing listens there
			// if connecting fails.
			if c, err := net.Dial("unix", path); err == nil {
				c.Close()
				return nil, "", fmt.Errorf("--listen %s: another server is listening there", a.Address)
			}
			os.Remove(path)
		}
		l, err := net.Listen("unix", path)
		if err != nil {
			return nil, "", fmt.Errorf("--listen %s: %w", a.Address, err)
		}
		if err := os.Chmod(path, 0o600); err != nil {
			l.Close()
			return nil, "", err
		}
		return l, "unix://" + path, nil
	}
	host, _, err := net.SplitHostPort(a.Address)
	if err != nil {
		return nil, "", fmt.Errorf("--listen %q: give unix:///PATH, a socket path, or HOST:PORT (%v)", a.Address, err)
	}
	if !loopback(host) && a.Token == "" {
		return nil, "", fmt.Errorf("--listen %s: anyone who reaches this address could run commands in your sandboxes: serve on loopback or a unix socket, or set --token-file (and --tls-cert-file/--tls-key-file)", a.Address)
	}
	l, err := net.Listen("tcp", a.Address)
	if err != nil {
		return nil, "", fmt.Errorf("--listen %s: %w", a.Address, err)
	}
	scheme := "http"
	if a.CertFile != "" {
		scheme = "https"
	}
	return l, scheme + "://" + l.Addr().String(), nil
}

func unixPath(addr string) (string, bool) {
	if p, ok := strings.CutPrefix(addr, "unix://"); ok {
		return p, true
	}
	return addr, strings.HasPrefix(addr, "/") || strings.HasPrefix(addr, ".")
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Serve serves v on l until ctx ends or a client closes the session, then
// stops taking calls, waits a moment for calls in flight, and returns.
func Serve(ctx context.Context, l net.Listener, v *Service, a Access) error {
	mux := http.NewServeMux()
	path, handler := fleetv1connect.NewFleetServiceHandler(v, connect.WithReadMaxBytes(64<<20), connect.WithInterceptors(traced{}))
	mux.Handle(path, handler)
	var h http.Handler = mux
	if a.Token != "" {
		h = bearer(a.Token, h)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	srv.Protocols.SetHTTP2(true)
	errc := make(chan error, 1)
	go func() {
		var err error
		if a.CertFile != "" {
			srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
			err = srv.ServeTLS(l, a.CertFile, a.KeyFile)
		} else {
			err = srv.Serve(l)
		}
		errc <- err
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	case <-v.Closed():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = srv.Close()
	}
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

// bearer lets through only requests that carry token.
func bearer(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"code":"unauthenticated","message":"a bearer token is required: send Authorization: Bearer <the serve --token-file's token>"}`)
			return
		}
		next.ServeHTTP(w, r)
	})
}
