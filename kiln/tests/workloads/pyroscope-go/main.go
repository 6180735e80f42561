// A Go program with known shares of its CPU time, profiled by the
// official pyroscope-go SDK and pushed to Kiln (kiln/tests/pyroscope.rs).
//
// Each round it spins 6n iterations of one loop body in workSixty, 3n in
// workThirty and n in workTen: 60/30/10 of its CPU time, all under
// main.main. Counts of work, not slices of wall-clock time, so the shares
// hold however often a busy host preempts it. n is drawn anew each round
// (a few ms of work): a fixed round would keep step with Go's 10 ms CPU
// profiling clock and bias what is sampled.
//
// Usage: pyroscope-shares URL KEY SECONDS
package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/grafana/pyroscope-go"
)

var sink uint64

//go:noinline
func spin(n int) {
	x := sink
	for i := 0; i < n; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	sink = x
}

//go:noinline
func workSixty(n int) { spin(6 * n) }

//go:noinline
func workThirty(n int) { spin(3 * n) }

//go:noinline
func workTen(n int) { spin(n) }

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: pyroscope-shares URL KEY SECONDS")
		os.Exit(2)
	}
	seconds, err := strconv.ParseFloat(os.Args[3], 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "SECONDS:", err)
		os.Exit(2)
	}
	profiler, err := pyroscope.Start(pyroscope.Config{
		ApplicationName:   "kiln-go",
		ServerAddress:     os.Args[1],
		BasicAuthUser:     "kiln",
		BasicAuthPassword: os.Args[2],
		UploadRate:        2 * time.Second,
		Tags:              map[string]string{"env": "test"},
		// Heap profiles too, as a default configuration sends them: Kiln
		// keeps them under their sample types.
		ProfileTypes: []pyroscope.ProfileType{
			pyroscope.ProfileCPU,
			pyroscope.ProfileAllocObjects,
			pyroscope.ProfileAllocSpace,
			pyroscope.ProfileInuseObjects,
			pyroscope.ProfileInuseSpace,
		},
		Logger: pyroscope.StandardLogger,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "pyroscope.Start:", err)
		os.Exit(1)
	}
	end := time.Now().Add(time.Duration(seconds * float64(time.Second)))
	for time.Now().Before(end) {
		n := 200_000 + rand.IntN(400_000)
		workSixty(n)
		workThirty(n)
		workTen(n)
	}
	// Stop flushes the last profile.
	if err := profiler.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "profiler.Stop:", err)
		os.Exit(1)
	}
}
