// Package output prints a verb's result in the format the user chose with -o.
package output

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/usage"
)

// Formats for -o. Human is a verb's own table or text.
const (
	Human = ""
	JSON  = "json"
	YAML  = "yaml"
)

// Validate returns a usage error when format is not one of allowed.
func Validate(format string, allowed ...string) error {
	if slices.Contains(allowed, format) {
		return nil
	}
	names := make([]string, 0, len(allowed))
	for _, a := range allowed {
		if a != Human {
			names = append(names, a)
		}
	}
	return usage.Errorf("unknown output format %q: use one of %s", format, strings.Join(names, ", "))
}

// Machine prints v as JSON or YAML.
func Machine(w io.Writer, format string, v any) error {
	switch format {
	case JSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case YAML:
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	default:
		return fmt.Errorf("output format %q is not a machine format", format)
	}
}

// OrNone is s, or <none> when it is empty, as kubectl prints missing values.
func OrNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// Count is n with noun, plural unless n is 1: "1 cluster", "3 clusters".
func Count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	suffix := "s"
	for _, end := range []string{"s", "x", "ch", "sh"} {
		if strings.HasSuffix(noun, end) {
			suffix = "es"
		}
	}
	return fmt.Sprintf("%d %s%s", n, noun, suffix)
}

// Bytes is n in binary units, as kubectl and df -h print sizes: "0 B",
// "512 KiB", "1.5 GiB".
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	value, exp := float64(n), 0
	for value >= unit && exp < 6 {
		value /= unit
		exp++
	}
	s := strconv.FormatFloat(value, 'f', 1, 64)
	return strings.TrimSuffix(s, ".0") + " " + "KMGTPE"[exp-1:exp] + "iB"
}

// Age is kubectl's rendering of how long ago t was.
func Age(t metav1.Time, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}
