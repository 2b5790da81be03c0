// Package images normalises container image references and rewrites them
// to mirrors. The fleet applies rewrite rules to tasks and the webhook to
// Pods, so both share this one implementation.
package images

import (
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// dockerHub is the registry an image reference without a host names.
const dockerHub = "docker.io"

// Normalize returns the fully qualified form of a reference, as containerd
// and the kubelet resolve it: an explicit registry host (docker.io when none
// is given), the library/ namespace for Docker Hub's official images, and
// the tag latest when neither tag nor digest is given. It fails on a
// reference the kubelet would reject as InvalidImageName.
func Normalize(image string) (string, error) {
	if _, err := name.ParseReference(image, name.WeakValidation); err != nil {
		return "", fmt.Errorf("invalid image reference %q: %w", image, err)
	}
	host, rest := splitHost(image)
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
// host, or a host and path prefix — at a path boundary: docker.io/library
// holds docker.io/library/busybox:1.36 but not docker.io/libraryx/a.
func Within(image, prefix string) (bool, error) {
	full, err := Normalize(image)
	if err != nil {
		return false, err
	}
	_, ok := under(full, strings.TrimSuffix(prefix, "/"))
	return ok, nil
}

// under cuts prefix off the normalised image full when it ends at a path,
// tag or digest boundary.
func under(full, prefix string) (rest string, ok bool) {
	rest, ok = strings.CutPrefix(full, prefix)
	return rest, ok && (strings.HasPrefix(rest, "/") || strings.HasPrefix(rest, ":") || strings.HasPrefix(rest, "@"))
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
		from := r.From
		if !strings.Contains(from, "/") && !strings.ContainsAny(from, ".:") && from != "localhost" {
			// A bare name such as "busybox" means a Docker Hub path.
			from = dockerHub + "/" + from
		}
		if rest, ok := under(full, from); ok {
			return r.To + rest, true, nil
		}
	}
	return image, false, nil
}
