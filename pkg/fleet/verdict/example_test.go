package verdict_test

import (
	"errors"
	"fmt"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/verdict"
)

// A failure of the infrastructure carries its reason, so a trainer masks
// it out of the loss instead of counting it against the policy.
func ExampleInfrastructure() {
	err := fmt.Errorf("task t1: %w", verdict.Infrastructure(verdict.Lost, errors.New("the sandbox's Pod was deleted")))
	fmt.Println(verdict.Reason(err))
	fmt.Println(err)
	// Output:
	// lost
	// task t1: the sandbox's Pod was deleted
}
