package exec

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// Forward is a port of a Pod served on a local address, through the API
// server's port-forward as `kubectl port-forward` does it.
type Forward struct {
	// Address is host:port on 127.0.0.1.
	Address string
	stop    chan struct{}
	done    chan struct{}
}

// PortForward serves port of the Pod on 127.0.0.1 (a port the system
// picks) until Close: each connection to it is a stream to the port in the
// Pod. WebSocket first, SPDY where the API server refuses the upgrade.
//
// client-go's forwarder ends at the first connection the Pod refuses (a
// server in the sandbox not listening yet); the forward then starts again
// on the same local port, so a client that retries gets through once the
// server listens.
func PortForward(cfg *rest.Config, kc kubernetes.Interface, namespace, pod string, port int) (*Forward, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d: give a port from 1 to 65535", port)
	}
	u := kc.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return nil, err
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, "POST", u)
	if ws, err := portforward.NewSPDYOverWebsocketDialer(u, cfg); err == nil {
		dialer = portforward.NewFallbackDialer(ws, dialer, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
	}
	f := &Forward{stop: make(chan struct{}), done: make(chan struct{})}
	// forward serves local (0: any) until the forwarder ends, and returns
	// the local port once it listens.
	forward := func(local int) (int, <-chan error, error) {
		ready := make(chan struct{})
		pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{strconv.Itoa(local) + ":" + strconv.Itoa(port)}, f.stop, ready, io.Discard, io.Discard)
		if err != nil {
			return 0, nil, err
		}
		ended := make(chan error, 1)
		go func() { ended <- pf.ForwardPorts() }()
		select {
		case <-ready:
		case err := <-ended:
			return 0, nil, fmt.Errorf("forwarding port %d of pod %s/%s: %w", port, namespace, pod, err)
		}
		ports, err := pf.GetPorts()
		if err != nil || len(ports) != 1 {
			return 0, ended, fmt.Errorf("forwarding port %d of pod %s/%s: no local port (%v)", port, namespace, pod, err)
		}
		return int(ports[0].Local), ended, nil
	}
	local, ended, err := forward(0)
	if err != nil {
		if ended != nil {
			f.Close()
		}
		return nil, err
	}
	f.Address = "127.0.0.1:" + strconv.Itoa(local)
	go func() {
		defer close(f.done)
		for {
			select {
			case <-ended:
			case <-f.stop:
				<-ended
				return
			}
			select {
			case <-f.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			// Again on the same port, until the forward is closed.
			for {
				if _, ended, err = forward(local); err == nil {
					break
				}
				select {
				case <-f.stop:
					return
				case <-time.After(time.Second):
				}
			}
		}
	}()
	return f, nil
}

// Close stops serving the address and frees it.
func (f *Forward) Close() {
	select {
	case <-f.stop:
	default:
		close(f.stop)
	}
	<-f.done
}
