// protogen, which generates the Go code of api/fleet/v1 (`make generate`)
// with pure-Go tools. Pinned apart from the other tools.
module github.com/sandbox-fleet/sandbox-fleet/hack/tools/protogen

go 1.26.0

require (
	github.com/bufbuild/protocompile v0.14.1
	google.golang.org/protobuf v1.36.12
)

require (
	connectrpc.com/connect v1.21.1 // indirect
	golang.org/x/sync v0.8.0 // indirect
)

tool (
	connectrpc.com/connect/cmd/protoc-gen-connect-go
	google.golang.org/protobuf/cmd/protoc-gen-go
)
