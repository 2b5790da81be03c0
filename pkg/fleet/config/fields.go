package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/api/resource"
)

var (
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	quantityType    = reflect.TypeFor[resource.Quantity]()
)

// checkFields walks the YAML tree against the Go type it decodes into and
// reports, with their exact lines, the unknown fields and bad quantities
// that the JSON decoder would report without a line or a path.
func checkFields(node *yaml.Node, t reflect.Type, path string, fail func(line int, path, msg string)) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if node.Kind == yaml.AliasNode && node.Alias != nil {
		node = node.Alias
	}
	if t == quantityType {
		if _, err := resource.ParseQuantity(node.Value); err != nil {
			fail(node.Line, path, fmt.Sprintf("%q is not a quantity such as 500m, 2 or 4Gi", node.Value))
		}
		return
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return // durations and the like decode themselves; the decoder checks them
	}
	switch t.Kind() {
	case reflect.Struct:
		if node.Kind != yaml.MappingNode {
			return // the decoder reports the type mismatch
		}
		fields := jsonFields(t)
		for i := 0; i+1 < len(node.Content); i += 2 {
			key := node.Content[i]
			ft, ok := fields[key.Value]
			if !ok {
				fail(key.Line, join(path, key.Value), "unknown field (see the documented fields in examples/fleet.yaml)")
				continue
			}
			checkFields(node.Content[i+1], ft, join(path, key.Value), fail)
		}
	case reflect.Map:
		if node.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(node.Content); i += 2 {
				checkFields(node.Content[i+1], t.Elem(), join(path, node.Content[i].Value), fail)
			}
		}
	case reflect.Slice:
		if node.Kind == yaml.SequenceNode {
			for i, el := range node.Content {
				checkFields(el, t.Elem(), fmt.Sprintf("%s[%d]", path, i), fail)
			}
		}
	}
}

// jsonFields maps a struct's JSON field names, inlined structs included,
// to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" && (f.Anonymous || strings.Contains(opts, "inline")) {
			for k, v := range jsonFields(f.Type) {
				fields[k] = v
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
	return fields
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}
