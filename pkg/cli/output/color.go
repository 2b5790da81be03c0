package output

import (
	"io"
	"os"

	"golang.org/x/term"
)

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Palette colours words of human output. It is off unless the output is a
// terminal, so files and pipes never receive escape sequences, and it
// honours NO_COLOR (https://no-color.org) and TERM=dumb.
type Palette struct{ on bool }

// Colors returns the palette for output written to w.
func Colors(w io.Writer) Palette {
	return Palette{on: IsTerminal(w) && os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb"}
}

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
