package fleetclient_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"connectrpc.com/connect"

	fleetv1 "github.com/sandbox-fleet/sandbox-fleet/api/fleet/v1"
	"github.com/sandbox-fleet/sandbox-fleet/api/fleet/v1/fleetv1connect"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleetclient"
)

// fakeSession stands in for `kubectl sandbox-fleet serve` here: it answers
// Status, and nothing else.
type fakeSession struct {
	fleetv1connect.UnimplementedFleetServiceHandler
}

func (fakeSession) Status(context.Context, *connect.Request[fleetv1.StatusRequest]) (*connect.Response[fleetv1.StatusResponse], error) {
	return connect.NewResponse(&fleetv1.StatusResponse{RunId: "serve-20261203-090000-a1b2c3", Namespace: "rl", Tasks: 64}), nil
}

// A Go trainer calls the session serve printed the address of.
func ExampleNew() {
	mux := http.NewServeMux()
	mux.Handle(fleetv1connect.NewFleetServiceHandler(fakeSession{}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	c, err := fleetclient.New(srv.URL)
	if err != nil {
		panic(err)
	}
	resp, err := c.Status(context.Background(), connect.NewRequest(&fleetv1.StatusRequest{}))
	if err != nil {
		panic(err)
	}
	fmt.Println(resp.Msg.RunId, resp.Msg.Namespace, resp.Msg.Tasks)
	// Output: serve-20261203-090000-a1b2c3 rl 64
}
