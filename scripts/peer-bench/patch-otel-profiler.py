#!/usr/bin/env python3
"""Makes two fatal start-up steps of the OpenTelemetry eBPF profiler
warnings, so that it runs where Kiln's benches and tests do (a container or
VM as root without CAP_SYS_RESOURCE, on a kernel without kprobes); neither
touches sampling or unwinding:

 - raising RLIMIT_MEMLOCK (kernels since 5.11 charge eBPF memory to the
   memory cgroup instead);
 - the kprobe on bpf_ksym_add, which only refreshes kernel symbols of eBPF
   programs loaded later (versions before v0.0.202613 only; later ones
   start without it).

Usage: patch-otel-profiler.py SOURCE_DIR  (the module's source, writable)
"""
import sys

src = sys.argv[1]


def patch(path, old, new, required=True):
    p = f"{src}/{path}"
    text = open(p).read()
    if old not in text:
        if required:
            sys.exit(f"{path} changed upstream; Kiln's patch no longer applies: {old!r}")
        return
    open(p, "w").write(text.replace(old, new))


patch("rlimit/rlimit.go",
      '\t\treturn nil, fmt.Errorf("failed to set temporary rlimit: %w", err)',
      '\t\t// Patched by Kiln\'s scripts/peer-bench/patch-otel-profiler.py.\n'
      '\t\tlog.Warnf("memlock rlimit not raised (%v): going on", err)\n'
      '\t\treturn func() {}, nil')
patch("rlimit/rlimit.go", '\t"fmt"\n', '')
patch("tracer/tracer.go",
      '\t\treturn fmt.Errorf("failed opening kprobe for kallsyms trigger: %s", err)',
      '\t\t// Patched by Kiln\'s scripts/peer-bench/patch-otel-profiler.py.\n'
      '\t\tlog.Warnf("kallsyms updates not watched (no kprobe): %s", err)\n'
      '\t\treturn nil',
      required=False)
