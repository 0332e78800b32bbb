// Command hello stands in for cordon's binary in TestCordonImage: a static program alone in a
// scratch image, which says who it runs as and that the root file system is read-only.
package main

import (
	"fmt"
	"os"
)

func main() {
	err := os.WriteFile("/written", nil, 0o644)
	fmt.Printf("uid %d, write to / refused: %v\n", os.Getuid(), err != nil)
}
