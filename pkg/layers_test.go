// Package pkg_test checks the layers of the module: what the public
// packages under pkg/ hand their users — nothing of theirs may be a type
// from an internal package, which code outside this module cannot name,
// match with errors.As, or read the documentation of — and that
// dependencies run one way, from the internal packages to the public
// engine and not back, and from the command tree to its verbs and not
// between them.
package pkg_test

import (
	"encoding/json"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
)

const module = "github.com/sandbox-fleet/sandbox-fleet"

// listed is a package of the module as go list gives it.
type listed struct {
	ImportPath, Export string
	Deps               []string
}

// golist is go list's answer for the module, listed once for the tests:
// it compiles every package for its export data.
var golist = sync.OnceValues(func() ([]byte, error) {
	return exec.Command("go", "list", "-export", "-deps", "-json=ImportPath,Export,Deps", "../...").Output()
})

// packages lists the module's packages and what they depend on, with
// their export data, and an importer of the types from that data.
func packages(t *testing.T) ([]listed, types.Importer) {
	t.Helper()
	out, err := golist()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	exports := map[string]string{}
	var own []listed
	for dec := json.NewDecoder(strings.NewReader(string(out))); dec.More(); {
		var p listed
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		exports[p.ImportPath] = p.Export
		if strings.HasPrefix(p.ImportPath, module+"/") {
			own = append(own, p)
		}
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok || file == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	return own, imp
}

func TestPublicAPIHasNoInternalTypes(t *testing.T) {
	own, imp := packages(t)
	leaks := map[string]string{}
	for _, p := range own {
		if !strings.HasPrefix(p.ImportPath, module+"/pkg/") || strings.Contains(p.ImportPath, "/internal/") {
			continue
		}
		pkg, err := imp.Import(p.ImportPath)
		if err != nil {
			t.Fatal(err)
		}
		maps.Copy(leaks, internalTypes(pkg))
	}
	for _, key := range slices.Sorted(maps.Keys(leaks)) {
		t.Errorf("%s (at %s): the public API hands out a type of an internal package", key, leaks[key])
	}
}

// The packages under pkg/fleet/internal are the public engine's parts and
// never depend on it (the compiler keeps everything outside pkg/fleet from
// importing them); a verb of the command tree (a package under internal/cli
// with a NewCommand) depends on no other verb — what verbs share lives in
// packages of its own.
func TestDependenciesRunOneWay(t *testing.T) {
	own, imp := packages(t)
	verbs := map[string]bool{}
	for _, p := range own {
		rest, ok := strings.CutPrefix(p.ImportPath, module+"/internal/cli/")
		if !ok || strings.Contains(rest, "/") {
			continue
		}
		pkg, err := imp.Import(p.ImportPath)
		if err != nil {
			t.Fatal(err)
		}
		if pkg.Scope().Lookup("NewCommand") != nil {
			verbs[p.ImportPath] = true
		}
	}
	if len(verbs) < 10 {
		t.Fatalf("found %d verbs under internal/cli, want every verb of the plugin", len(verbs))
	}
	for _, p := range own {
		for _, d := range p.Deps {
			switch {
			case strings.HasPrefix(p.ImportPath, module+"/pkg/fleet/internal/") && d == module+"/pkg/fleet":
				t.Errorf("%s depends on %s, whose parts it is", p.ImportPath, d)
			case verbs[p.ImportPath] && verbs[d]:
				t.Errorf("the verb %s depends on the verb %s", p.ImportPath, d)
			}
		}
	}
}

// internalTypes are the internal types pkg's exported API names — in its
// exported objects, and what their types reach through exported fields,
// methods, parameters and results — as "package: type" (both without the
// module's path), each with where it was first met.
func internalTypes(pkg *types.Package) map[string]string {
	found := map[string]string{}
	short := func(path string) string { return strings.TrimPrefix(path, module+"/") }
	seen := map[types.Type]bool{}
	var walk func(at string, t types.Type)
	walk = func(at string, t types.Type) {
		if seen[t] {
			return
		}
		seen[t] = true
		switch t := t.(type) {
		case *types.Alias:
			// An alias hands out the type it names.
			walk(at, types.Unalias(t))
		case *types.Named:
			obj := t.Obj()
			if obj.Pkg() == nil {
				return
			}
			if strings.Contains(obj.Pkg().Path(), "/internal/") {
				key := short(pkg.Path()) + ": " + short(obj.Pkg().Path()) + "." + obj.Name()
				if _, ok := found[key]; !ok {
					found[key] = at
				}
				return
			}
			if obj.Pkg().Path() != pkg.Path() && !strings.HasPrefix(obj.Pkg().Path(), module+"/") {
				return
			}
			for a := range t.TypeArgs().Types() {
				walk(at, a)
			}
			for i := range t.NumMethods() {
				if m := t.Method(i); m.Exported() {
					walk(at+"."+m.Name(), m.Type())
				}
			}
			walk(at, t.Underlying())
		case *types.Pointer:
			walk(at, t.Elem())
		case *types.Slice:
			walk(at, t.Elem())
		case *types.Array:
			walk(at, t.Elem())
		case *types.Map:
			walk(at, t.Key())
			walk(at, t.Elem())
		case *types.Chan:
			walk(at, t.Elem())
		case *types.Signature:
			for v := range t.Params().Variables() {
				walk(at, v.Type())
			}
			for v := range t.Results().Variables() {
				walk(at, v.Type())
			}
		case *types.Struct:
			for i := range t.NumFields() {
				if f := t.Field(i); f.Exported() {
					walk(at+"."+f.Name(), f.Type())
				}
			}
		case *types.Interface:
			for i := range t.NumMethods() {
				if m := t.Method(i); m.Exported() {
					walk(at+"."+m.Name(), m.Type())
				}
			}
		}
	}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		if obj := scope.Lookup(name); obj.Exported() {
			walk(short(pkg.Path())+"."+name, obj.Type())
		}
	}
	return found
}
