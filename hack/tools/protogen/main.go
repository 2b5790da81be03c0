// Command protogen generates the Go code of the project's protobuf APIs
// (api/fleet/v1) with pure-Go tools only: protocompile parses the .proto
// files, and protoc-gen-go and protoc-gen-connect-go, pinned as tools of
// this module, generate from them as they would under protoc. No protoc
// binary is needed.
//
//	go run . -root ../../.. -out ../../.. api/fleet/v1/fleet.proto
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/pluginpb"
)

// plugins run over every file, each with its parameters.
var plugins = []struct{ tool, param string }{
	{"protoc-gen-go", "paths=source_relative"},
	{"protoc-gen-connect-go", "paths=source_relative"},
}

func main() {
	root := flag.String("root", ".", "directory the .proto paths are relative to")
	out := flag.String("out", ".", "directory to write the generated files under")
	flag.Parse()
	if err := generate(context.Background(), *root, *out, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "protogen:", err)
		os.Exit(1)
	}
}

func generate(ctx context.Context, root, out string, files []string) error {
	if len(files) == 0 {
		return fmt.Errorf("no .proto file given")
	}
	compiler := protocompile.Compiler{
		Resolver:       protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: []string{root}}),
		SourceInfoMode: protocompile.SourceInfoStandard,
	}
	compiled, err := compiler.Compile(ctx, files...)
	if err != nil {
		return err
	}
	req := &pluginpb.CodeGeneratorRequest{FileToGenerate: files}
	seen := map[string]bool{}
	for _, f := range compiled {
		req.ProtoFile = appendWithImports(req.ProtoFile, f, seen)
	}
	for _, p := range plugins {
		req.Parameter = proto.String(p.param)
		resp, err := run(ctx, p.tool, req)
		if err != nil {
			return err
		}
		for _, f := range resp.File {
			path := filepath.Join(out, f.GetName())
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(path, []byte(f.GetContent()), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// appendWithImports appends f's descriptor after those of the files it
// imports, as a CodeGeneratorRequest lists them.
func appendWithImports(list []*descriptorpb.FileDescriptorProto, f protoreflect.FileDescriptor, seen map[string]bool) []*descriptorpb.FileDescriptorProto {
	if seen[f.Path()] {
		return list
	}
	seen[f.Path()] = true
	imports := f.Imports()
	for i := range imports.Len() {
		list = appendWithImports(list, imports.Get(i).FileDescriptor, seen)
	}
	return append(list, protodesc.ToFileDescriptorProto(f))
}

// run runs a protoc plugin, a tool of this module, on req.
func run(ctx context.Context, tool string, req *pluginpb.CodeGeneratorRequest) (*pluginpb.CodeGeneratorResponse, error) {
	in, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", "tool", tool)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", tool, err, stderr.Bytes())
	}
	resp := &pluginpb.CodeGeneratorResponse{}
	if err := proto.Unmarshal(stdout.Bytes(), resp); err != nil {
		return nil, fmt.Errorf("%s: reading its response: %w", tool, err)
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("%s: %s", tool, resp.GetError())
	}
	return resp, nil
}
