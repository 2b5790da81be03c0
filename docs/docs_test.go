// Package docs holds the user documentation. Its tests keep it true to
// the code: the generated references current, every command shown with a
// "$ " prompt one the plugin parses, every relative link resolving,
// every public Go package documented with a runnable example, and
// architecture.md's Layout naming every package where it is.
package docs_test

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli"
	"github.com/sandbox-fleet/sandbox-fleet/internal/docgen"
)

// root is the repository's root, from this package's directory.
const root = ".."

// pages are the Markdown files users read: the READMEs and docs/.
func pages(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, pattern := range []string{"README.md", "*/README.md", "*/*/README.md", "docs/*.md", "docs/*/*.md", "docs/*/*/*.md"} {
		matches, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, matches...)
	}
	if len(out) == 0 {
		t.Fatal("no Markdown found")
	}
	return out
}

func TestReferenceIsCurrent(t *testing.T) {
	stale, err := docgen.Stale(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) > 0 {
		t.Errorf("the generated references are not what the code renders; run make docs:\n  %s", strings.Join(stale, "\n  "))
	}
}

// A command shown as typed, after a "$ " prompt, names verbs and flags
// that exist.
func TestCommandsParse(t *testing.T) {
	seen := 0
	for _, page := range pages(t) {
		for _, c := range shownCommands(t, page) {
			seen++
			args, err := split(c.line)
			if err != nil {
				t.Errorf("%s:%d: %v: %s", c.file, c.n, err, c.line)
				continue
			}
			if err := parses(args); err != nil {
				t.Errorf("%s:%d: %v\n  %s", c.file, c.n, err, c.line)
			}
		}
	}
	if seen == 0 {
		t.Error("no command found after a $ prompt")
	}
}

type shown struct {
	file string
	n    int
	line string
}

// plugin matches the plugin's invocation in a shown command, after any
// environment assignments.
var plugin = regexp.MustCompile(`^\$ (?:[A-Z_]+=\S* )*kubectl(?: |-)sandbox[-_]fleet(?: |$)`)

// shownCommands are the plugin's command lines after a "$ " prompt in
// file, continuation lines joined.
func shownCommands(t *testing.T, file string) []shown {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []shown
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		m := plugin.FindString(line)
		if m == "" {
			continue
		}
		start := n
		cmd := strings.TrimSpace(line[len(m):])
		for strings.HasSuffix(cmd, `\`) && sc.Scan() {
			n++
			cmd = strings.TrimSuffix(cmd, `\`) + " " + strings.TrimSpace(sc.Text())
		}
		out = append(out, shown{file: file, n: start, line: cmd})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// split splits a shell command line into words, up to a pipe, a list or a
// redirection: what the plugin is given.
func split(line string) ([]string, error) {
	var words []string
	var word strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'' || c == '"':
			end := strings.IndexByte(line[i+1:], c)
			if end < 0 {
				return nil, fmt.Errorf("unclosed %c", c)
			}
			word.WriteString(line[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case c == '\\' && i+1 < len(line):
			i++
			word.WriteByte(line[i])
			inWord = true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		case strings.IndexByte("|&;<>", c) >= 0:
			// The plugin's arguments end at a pipe, a list or a
			// redirection; the 2 of "2>" is not one of them.
			if inWord && (c != '>' || word.String() != "2") {
				words = append(words, word.String())
			}
			return words, nil
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, word.String())
	}
	return words, nil
}

// parses reports whether args name a command of the plugin and flags it
// takes.
func parses(args []string) error {
	root := cli.NewCommand(genericiooptions.NewTestIOStreamsDiscard())
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if cmd == root && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		return fmt.Errorf("unknown command %q", rest[0])
	}
	return cmd.ParseFlags(rest)
}

// link matches a Markdown link's target.
var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// Every relative link names a file of the repository, and an anchor in a
// Markdown file one of its headings.
func TestLinks(t *testing.T) {
	for _, page := range pages(t) {
		raw, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(raw), "\n") {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				file := page
				if path != "" {
					file = filepath.Join(filepath.Dir(page), path)
					if _, err := os.Stat(file); err != nil {
						t.Errorf("%s:%d: link to %s: no such file", page, i+1, target)
						continue
					}
				}
				if anchor != "" && strings.HasSuffix(file, ".md") && !hasAnchor(t, file, anchor) {
					t.Errorf("%s:%d: link to %s: %s has no heading with anchor #%s", page, i+1, target, file, anchor)
				}
			}
		}
	}
}

// hasAnchor reports whether a heading of the Markdown file has anchor, as
// GitHub makes them: lower case, punctuation dropped, spaces as hyphens.
func hasAnchor(t *testing.T, file, anchor string) bool {
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	inCode := false
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		if slug(strings.TrimLeft(line, "# ")) == anchor {
			return true
		}
	}
	return false
}

func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Every public package — under pkg/ and api/, not under an internal
// directory — reads as a guide in go doc:
// a package comment, and at least one example that runs as a test (it
// has an Output comment).
func TestPublicPackagesHaveDocsAndExamples(t *testing.T) {
	for _, top := range []string{"pkg", "api"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(dir string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() || d.Name() == "testdata" {
				return err
			}
			if d.Name() == "internal" {
				// Not public: only the tree it sits in may import it.
				return filepath.SkipDir
			}
			pkgs, err := parser.ParseDir(token.NewFileSet(), dir, nil, parser.ParseComments)
			if err != nil {
				return err
			}
			var documented, hasCode bool
			var files []*ast.File
			for name, pkg := range pkgs {
				for path, f := range pkg.Files {
					files = append(files, f)
					if strings.HasSuffix(name, "_test") || strings.HasSuffix(path, "_test.go") {
						continue
					}
					hasCode = true
					documented = documented || f.Doc != nil
				}
			}
			if !hasCode {
				return nil
			}
			if !documented {
				t.Errorf("%s: no package comment", dir)
			}
			runs := false
			for _, ex := range doc.Examples(files...) {
				runs = runs || ex.Output != "" || ex.EmptyOutput
			}
			if !runs {
				t.Errorf("%s: no example that runs as a test (an Example function with an Output comment)", dir)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// flagDef matches a flag defined in a command's main.go, flagRow one in the
// flags table of its README.
var (
	flagDef = regexp.MustCompile(`flag\.\w+Var\([^,]+, "([a-z0-9-]+)"`)
	flagRow = regexp.MustCompile("(?m)^\\| `--?([a-z0-9-]+)`")
)

// A binary's README lists exactly the flags its main defines (and klog's
// -v).
func TestCommandReadmesListTheirFlags(t *testing.T) {
	mains, err := filepath.Glob(filepath.Join(root, "cmd", "*", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, main := range mains {
		src, err := os.ReadFile(main)
		if err != nil {
			t.Fatal(err)
		}
		readme, err := os.ReadFile(filepath.Join(filepath.Dir(main), "README.md"))
		if err != nil {
			t.Errorf("%s has no README.md", filepath.Dir(main))
			continue
		}
		defined, listed := map[string]bool{}, map[string]bool{}
		for _, m := range flagDef.FindAllStringSubmatch(string(src), -1) {
			defined[m[1]] = true
		}
		for _, m := range flagRow.FindAllStringSubmatch(string(readme), -1) {
			listed[m[1]] = true
		}
		for f := range defined {
			if !listed[f] {
				t.Errorf("%s: --%s is not in its README's flags table", main, f)
			}
		}
		for f := range listed {
			if !defined[f] && f != "v" {
				t.Errorf("%s's README lists --%s, which its main does not define", main, f)
			}
		}
	}
}
