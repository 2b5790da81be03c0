// Package images normalises container image references and rewrites them
// to mirrors. The fleet applies rewrite rules to tasks and the webhook to
// Pods, so both share this one implementation.
package images

import (
	"fmt"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// dockerHub is the registry an image reference without a host names.
const dockerHub = "docker.io"

// Normalize returns the fully qualified form of a reference, as containerd
// and the kubelet resolve it: an explicit registry host (docker.io when none
// is given), the library/ namespace for Docker Hub's official images, and
// the tag latest when neither tag nor digest is given. The host is
// lower-cased — DNS does not tell Docker.io from docker.io, so neither may
// a policy. It fails on a reference the kubelet would reject as
// InvalidImageName.
func Normalize(image string) (string, error) {
	if _, err := name.ParseReference(image, name.WeakValidation); err != nil {
		return "", fmt.Errorf("invalid image reference %q: %w", image, err)
	}
	host, rest := splitHost(image)
	host = strings.ToLower(host)
	if host == "" || host == "index.docker.io" || host == "registry-1.docker.io" {
		host = dockerHub
	}
	repo, suffix := splitRepo(rest)
	if host == dockerHub && !strings.Contains(repo, "/") {
		repo = "library/" + repo
	}
	if suffix == "" {
		suffix = ":latest"
	}
	return host + "/" + repo + suffix, nil
}

// NormalizeAll is the distinct Normalize forms of refs, in the order
// first met: the references a PrepullJob takes, since its admission
// policy judges registries only for images named in full, and two names
// of one image are one pull.
func NormalizeAll(refs []string) ([]string, error) {
	out := make([]string, 0, len(refs))
	for _, ref := range refs {
		full, err := Normalize(ref)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out, full) {
			out = append(out, full)
		}
	}
	return out, nil
}

// Familiar is the shortest reference Normalize maps to the same image:
// Docker Hub's host, its library/ namespace and the tag latest left out,
// as docker prints references. References it cannot parse are returned
// as they are.
func Familiar(image string) string {
	full, err := Normalize(image)
	if err != nil {
		return image
	}
	host, rest := splitHost(full)
	repo, suffix := splitRepo(rest)
	if suffix == ":latest" {
		suffix = ""
	}
	if host != dockerHub {
		return host + "/" + repo + suffix
	}
	return strings.TrimPrefix(repo, "library/") + suffix
}

// splitHost splits off the registry host: the first path segment is a host
// if it contains a dot or a colon or is localhost (Docker's reference grammar).
func splitHost(image string) (host, rest string) {
	head, tail, ok := strings.Cut(image, "/")
	if ok && (strings.ContainsAny(head, ".:") || head == "localhost") {
		return head, tail
	}
	return "", image
}

// splitRepo splits the repository path from its ":tag", "@digest" or both.
func splitRepo(rest string) (repo, suffix string) {
	if i := strings.Index(rest, "@"); i >= 0 {
		repo, suffix = rest[:i], rest[i:]
	} else {
		repo = rest
	}
	if i := strings.LastIndex(repo, ":"); i >= 0 {
		repo, suffix = repo[:i], repo[i:]+suffix
	}
	return repo, suffix
}

// Rule redirects images under From (a registry host, or a host and path
// prefix) to the same path under To.
type Rule struct {
	// From is a registry host ("docker.io") or a host and path prefix
	// ("docker.io/swebench"), and To what replaces it
	// ("mirror.example.com/dockerhub").
	From string `json:"from"`
	To   string `json:"to"`
}

// Source is the prefix of the normalised images the rule redirects: From
// as Prefix compares it, a bare name such as "busybox" being a Docker Hub
// path.
func (r Rule) Source() string {
	from := Prefix(r.From)
	if IsRegistry(from) && !strings.ContainsAny(from, ".:") && from != "localhost" {
		return dockerHub + "/" + from
	}
	return from
}

// ParseRule parses "from=to", e.g. "docker.io=mirror.example.com/dockerhub".
func ParseRule(s string) (Rule, error) {
	from, to, ok := strings.Cut(s, "=")
	from, to = strings.TrimSuffix(strings.TrimSpace(from), "/"), strings.TrimSuffix(strings.TrimSpace(to), "/")
	if !ok || from == "" || to == "" {
		return Rule{}, fmt.Errorf("rewrite rule %q: want FROM=TO, e.g. docker.io=mirror.example.com/dockerhub", s)
	}
	if _, err := name.NewRepository(to+"/x", name.WeakValidation); err != nil {
		return Rule{}, fmt.Errorf("rewrite rule %q: %q is not a registry or repository prefix: %w", s, to, err)
	}
	return Rule{From: from, To: to}, nil
}

// Within reports whether image, normalised, lies under prefix — a registry
// host, or a host and path prefix — at a boundary: docker.io/library holds
// docker.io/library/busybox:1.36 but not docker.io/libraryx/a, and a
// registry host holds only the paths under it, not the same host on
// another port (mirror.example.com does not hold mirror.example.com:5000/a).
// The webhook, its CEL call conditions (which mirror it) and the node
// agent all judge registries by it.
func Within(image, prefix string) (bool, error) {
	full, err := Normalize(image)
	if err != nil {
		return false, err
	}
	_, ok := under(full, Prefix(prefix))
	return ok, nil
}

// WithinAny reports whether image lies within one of prefixes (Within);
// an image that does not parse lies within none.
func WithinAny(image string, prefixes []string) bool {
	return slices.ContainsFunc(prefixes, func(p string) bool { ok, _ := Within(image, p); return ok })
}

// Prefix is a registry prefix as Within and Rewrite compare it: without
// a trailing slash, its host lower-cased.
func Prefix(prefix string) string {
	host, rest, found := strings.Cut(strings.TrimSuffix(prefix, "/"), "/")
	if !found {
		return strings.ToLower(host)
	}
	return strings.ToLower(host) + "/" + rest
}

// IsRegistry reports whether a prefix is a registry host alone, whose
// images must continue with a path; a repository prefix may also be
// followed by a tag or digest.
func IsRegistry(prefix string) bool { return !strings.Contains(prefix, "/") }

// under cuts prefix off the normalised image full when it ends at a
// boundary: a path after a registry host; a path, tag or digest after a
// repository.
func under(full, prefix string) (rest string, ok bool) {
	rest, ok = strings.CutPrefix(full, prefix)
	if !ok || rest == "" {
		return rest, false
	}
	if IsRegistry(prefix) {
		return rest, rest[0] == '/'
	}
	return rest, strings.ContainsRune("/:@", rune(rest[0]))
}

// Rewrite applies the first rule whose From is a prefix, at a path boundary,
// of the normalised image. It returns the image unchanged when no rule
// matches; rewritten images are returned normalised.
func Rewrite(rules []Rule, image string) (string, bool, error) {
	full, err := Normalize(image)
	if err != nil {
		return "", false, err
	}
	for _, r := range rules {
		if rest, ok := under(full, r.Source()); ok {
			return r.To + rest, true, nil
		}
	}
	return image, false, nil
}
