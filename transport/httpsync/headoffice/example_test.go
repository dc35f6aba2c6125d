package headoffice_test

import (
	"context"
	"log"
	"net/http"
	"time"

	"github.com/magicsync/magicsync/server"
	"github.com/magicsync/magicsync/transport/httpsync/headoffice"
)

// The head office mounts the sync endpoints beside its own routes, on an
// http.Server whose timeouts outlast a long-poll.
func ExampleHandler() {
	ctx := context.Background()
	var s *server.Server // from server.Open or server.New
	go func() { _ = s.Run(ctx) }()

	mux := http.NewServeMux()
	mux.Handle("/sync/", headoffice.Handler(s, headoffice.HandlerOptions{}))
	// WriteTimeout must outlast a long-poll (PollWait, 25 s by default).
	srv := &http.Server{Addr: ":8080", Handler: mux, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: time.Minute}
	log.Fatal(srv.ListenAndServe())
}
