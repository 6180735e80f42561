module kiln.dev/pyroscope-shares

go 1.25.0

require github.com/grafana/pyroscope-go v1.5.0

require (
	github.com/grafana/pyroscope-go/godeltaprof v0.1.12 // indirect
	github.com/klauspost/compress v1.20.2 // indirect
)
