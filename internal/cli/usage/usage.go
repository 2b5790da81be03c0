// Package usage marks errors that come from how a command was called, so the
// plugin can exit 2 for them and 1 for failures at run time.
package usage

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// Errorf is fmt.Errorf for usage errors.
func Errorf(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// Is reports whether err, or an error it wraps, is a usage error.
func Is(err error) bool { return errors.As(err, new(usageError)) }

// Args wraps a cobra argument validator so that its errors are usage errors.
func Args(validate cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := validate(cmd, args); err != nil {
			return Errorf("%w\nSee '%s --help'.", err, cmd.CommandPath())
		}
		return nil
	}
}

// Subcommand is the RunE of a verb that only groups others (get runs,
// describe run): called with no sub-verb, or one it does not know, it says
// which there are.
func Subcommand(cmd *cobra.Command, args []string) error {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	if len(args) == 0 {
		return Errorf("%s needs one of: %s\nSee '%s --help'.", cmd.CommandPath(), strings.Join(names, ", "), cmd.CommandPath())
	}
	return Errorf("%s: unknown %q: use one of %s\nSee '%s --help'.", cmd.CommandPath(), args[0], strings.Join(names, ", "), cmd.CommandPath())
}
