package output

import (
	"io"

	"k8s.io/cli-runtime/pkg/printers"
)

// Palette colours words of human output. It is off unless the output is a
// terminal that takes colour, as kubectl decides it: files and pipes never
// receive escape sequences, and NO_COLOR and TERM=dumb are honoured.
type Palette struct{ on bool }

// Colors returns the palette for output written to w.
func Colors(w io.Writer) Palette { return Palette{on: printers.AllowsColorOutput(w)} }

// Good marks a success.
func (p Palette) Good(s string) string { return p.paint("32", s) }

// Warn marks something to look at.
func (p Palette) Warn(s string) string { return p.paint("33", s) }

// Bad marks a failure.
func (p Palette) Bad(s string) string { return p.paint("31", s) }

// Bold marks a heading.
func (p Palette) Bold(s string) string { return p.paint("1", s) }

func (p Palette) paint(code, s string) string {
	if !p.on || s == "" {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}
