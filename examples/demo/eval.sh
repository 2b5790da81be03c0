#!/bin/sh
# Evaluates one task in its sandbox, the way a SWE-bench harness does: in
# a problem image, optionally apply the fix (mode "fix"), then run the
# repository's tests; the exit code is the verdict. A smoke task (a plain
# busybox image) only shows where it runs.
#
#   usage: eval.sh MODE     (run gives it {metadata.mode} of the task row)
mode=$1
if [ "$mode" = smoke ]; then
	echo "smoke task on $(hostname): $(uname -sr)"
	exit 0
fi
cd /testbed || { echo "no /testbed: not a problem image" >&2; exit 3; }
if [ "$mode" = fix ]; then
	sed -i 's/a - b/a + b/' calc.py
fi
python3 -m unittest -q 2>&1
