// Command conformance runs the magicsync conformance kit against a replica
// over NATS:
//
//	go run ./transport/natssync/conformance -transport nats -replica "<command>" [-database <postgres url>]
//
// It is the kit's command (conformance, at the module's root) with a
// transport to choose: under -transport nats (the default) the kit's head
// office — its faults injected by the kit's HTTP proxy as ever — is put
// behind a NATS server started inside the process, each exchange mapped as
// proto/PROTOCOL.md, section 11a, says, and the replica is given that
// server's nats:// URL as MAGICSYNC_URL; under -transport http it runs as
// the kit's own command does. The Go replica over NATS is
// ./transport/natssync/conformance/goreplica.
//
// It exits 0 when every case passed, 1 when one failed, and 2 when it
// could not run them.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/nats-io/nats.go"

	"github.com/magicsync/magicsync/internal/kitcmd"
	"github.com/magicsync/magicsync/transport/natssync/embedded"
	"github.com/magicsync/magicsync/transport/natssync/internal/bridge"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the kit's command (package internal/kitcmd) with -transport.
func run(args []string, stdout, stderr io.Writer) int {
	var transport *string
	return kitcmd.Command{
		Flags: func(fs *flag.FlagSet) {
			transport = fs.String("transport", "nats", `how the replica syncs: "nats" or "http"`)
		},
		Transport: func() (kitcmd.Transport, error) {
			switch *transport {
			case "nats":
				return kitcmd.Transport{Name: "nats", Front: natsFront}, nil
			case "http":
				return kitcmd.Transport{Name: "http"}, nil
			}
			return kitcmd.Transport{}, fmt.Errorf("-transport must be nats or http, not %q", *transport)
		},
	}.Run(args, stdout, stderr)
}

// natsFront starts a NATS server inside the process and answers the
// replica's requests on it by forwarding them to the kit's head office at
// httpURL; it returns the server's URL and what stops both.
func natsFront(ctx context.Context, httpURL string, log *slog.Logger) (string, func(), error) {
	ns, err := embedded.Start(embedded.Options{Name: "conformance"})
	if err != nil {
		return "", nil, err
	}
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		ns.Shutdown()
		return "", nil, err
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- bridge.Serve(ctx, nc, httpURL, "", log) }()
	return ns.URL(), func() {
		cancel()
		<-done
		nc.Close()
		ns.Shutdown()
	}, nil
}
