// kstatus reads Kubernetes objects (one JSON object per line) on stdin and prints, for
// each, the status kstatus (sigs.k8s.io/cli-utils, as Flux and `kubectl wait` use it)
// computes: Current, InProgress, Failed, ... and its message. Built by
// tests/tools/build.sh for the tests; not part of ruleop.
package main

import (
	"bufio"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	for in.Scan() {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(in.Bytes()); err != nil {
			fmt.Printf("Error\tnot an object: %v\n", err)
			continue
		}
		res, err := status.Compute(u)
		if err != nil {
			fmt.Printf("Error\t%v\n", err)
			continue
		}
		fmt.Printf("%s\t%s\n", res.Status, res.Message)
	}
}
