// kiln-peer-receiver: the smallest OTLP profiles collector, for
// scripts/peer-bench.sh. It takes what the OpenTelemetry eBPF profiler
// exports over gRPC (no TLS) and writes every CPU sample's stack as text,
// for agent/src/bin/peer_bench.rs to read:
//
//	S <pid> <count> <frames> <thread name>
//	F <frame type> <address, hex> <mapping file name>[\t<function>]...   (one per frame, leaf first)
//
// A native frame's address is the one the profiler reports: the address in
// the ELF file (what its symbol table uses), and it has no function: native
// code is not symbolized here. Frames the profiler names itself (Java,
// Python, the kernel's) carry their functions, one per line of the
// location, the inlined ones first.
//
// peer-bench.sh builds it inside the profiler's own module (copied from
// the Go module proxy), so it is compiled against the very pdata and gRPC
// versions the profiler sends with.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	// The profiler sends gzip-compressed requests.
	_ "google.golang.org/grpc/encoding/gzip"
)

type receiver struct {
	pprofileotlp.UnimplementedGRPCServer
	mu  sync.Mutex
	out *bufio.Writer
	// Exports and CPU samples received, for the log line at exit.
	exports, samples int64
}

func (r *receiver) Export(_ context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.exports++
	r.write(req.Profiles())
	if err := r.out.Flush(); err != nil {
		log.Printf("writing: %v", err)
	}
	return pprofileotlp.NewExportResponse(), nil
}

func (r *receiver) write(profiles pprofile.Profiles) {
	dic := profiles.Dictionary()
	strs := dic.StringTable()
	str := func(i int32) string {
		if i < 0 || int(i) >= strs.Len() {
			return ""
		}
		return strs.At(int(i))
	}
	attrs := dic.AttributeTable()
	// The value of the attribute named key among indices, as a string.
	attr := func(indices []int32, key string) (string, int64, bool) {
		for _, i := range indices {
			if i < 0 || int(i) >= attrs.Len() {
				continue
			}
			a := attrs.At(int(i))
			if str(a.KeyStrindex()) == key {
				return a.Value().AsString(), a.Value().Int(), true
			}
		}
		return "", 0, false
	}
	functions := dic.FunctionTable()
	locations := dic.LocationTable()
	mappings := dic.MappingTable()
	stacks := dic.StackTable()

	rps := profiles.ResourceProfiles()
	for i := 0; i < rps.Len(); i++ {
		sps := rps.At(i).ScopeProfiles()
		for j := 0; j < sps.Len(); j++ {
			profs := sps.At(j).Profiles()
			for k := 0; k < profs.Len(); k++ {
				prof := profs.At(k)
				// CPU samples only (not off-CPU or probe events).
				if str(prof.SampleType().TypeStrindex()) != "samples" {
					continue
				}
				samples := prof.Samples()
				for s := 0; s < samples.Len(); s++ {
					sample := samples.At(s)
					count := int64(sample.TimestampsUnixNano().Len())
					if count == 0 {
						for _, v := range sample.Values().AsRaw() {
							count += v
						}
					}
					if count == 0 {
						count = 1
					}
					_, pid, _ := attr(sample.AttributeIndices().AsRaw(), "process.pid")
					thread, _, _ := attr(sample.AttributeIndices().AsRaw(), "thread.name")
					var frames []int32
					if si := int(sample.StackIndex()); si >= 0 && si < stacks.Len() {
						frames = stacks.At(si).LocationIndices().AsRaw()
					}
					r.samples += count
					fmt.Fprintf(r.out, "S %d %d %d %s\n", pid, count, len(frames), thread)
					for _, li := range frames {
						if li < 0 || int(li) >= locations.Len() {
							fmt.Fprintf(r.out, "F invalid 0 \n")
							continue
						}
						loc := locations.At(int(li))
						kind, _, _ := attr(loc.AttributeIndices().AsRaw(), "profile.frame.type")
						if kind == "" {
							kind = "unknown"
						}
						file := ""
						if mi := int(loc.MappingIndex()); mi > 0 && mi < mappings.Len() {
							file = str(mappings.At(mi).FilenameStrindex())
						}
						fmt.Fprintf(r.out, "F %s %x %s", kind, loc.Address(), file)
						lines := loc.Lines()
						for l := 0; l < lines.Len(); l++ {
							name := ""
							if fi := int(lines.At(l).FunctionIndex()); fi > 0 && fi < functions.Len() {
								name = str(functions.At(fi).NameStrindex())
							}
							fmt.Fprintf(r.out, "\t%s", name)
						}
						fmt.Fprintln(r.out)
					}
				}
			}
		}
	}
}

func main() {
	listen := flag.String("listen", "127.0.0.1:4317", "address to serve OTLP/gRPC on")
	outPath := flag.String("out", "", "file the samples are written to (default: stdout)")
	flag.Parse()

	out := os.Stdout
	if *outPath != "" {
		f, err := os.Create(*outPath)
		if err != nil {
			log.Fatal(err)
		}
		out = f
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	r := &receiver{out: bufio.NewWriterSize(out, 1<<20)}
	server := grpc.NewServer(grpc.MaxRecvMsgSize(256 << 20))
	pprofileotlp.RegisterGRPCServer(server, r)

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-stop
		server.Stop()
	}()
	log.Printf("kiln-peer-receiver: OTLP profiles on %s", lis.Addr())
	if err := server.Serve(lis); err != nil {
		log.Print(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.out.Flush()
	log.Printf("kiln-peer-receiver: %d exports, %d CPU samples", r.exports, r.samples)
}
