// A Go program with known shares of its CPU time, profiled by the
// official pyroscope-go SDK and pushed to Kiln (kiln/tests/pyroscope.rs).
//
// Every period it spins 60 % of it in workSixty, 30 % in workThirty and
// 10 % in workTen: 60/30/10 of its CPU time, all under main.main. The
// period is drawn anew each time, 10 to 30 ms: a fixed one would keep
// step with Go's 10 ms CPU profiling clock and bias what is sampled.
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
func spin(until time.Time) {
	x := sink
	for time.Now().Before(until) {
		for i := 0; i < 1000; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	sink = x
}

//go:noinline
func workSixty(until time.Time) { spin(until) }

//go:noinline
func workThirty(until time.Time) { spin(until) }

//go:noinline
func workTen(until time.Time) { spin(until) }

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
		// answers 200 and keeps only CPU for now.
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
		start := time.Now()
		period := time.Duration(10_000+rand.IntN(20_000)) * time.Microsecond
		workSixty(start.Add(period * 6 / 10))
		workThirty(start.Add(period * 9 / 10))
		workTen(start.Add(period))
	}
	// Stop flushes the last profile.
	if err := profiler.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "profiler.Stop:", err)
		os.Exit(1)
	}
}
