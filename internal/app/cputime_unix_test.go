//go:build unix

package app

import (
	"syscall"
	"time"
)

// processCPU is the CPU time this process has used, user and system: a
// benchmark reports it per call (cpu-ns/op), which on a busy machine
// varies less than the wall time, and counts the work of every goroutine
// of the call.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
