package headoffice

import (
	"net/http"

	"github.com/magicsync/magicsync/server"
)

// Handler returns the http.Handler serving the sync endpoints over s:
// NewHandler(ForServer(s), opts). Its paths begin with /sync/: mount it
// at the root, or at "/sync/" beside the host's own routes.
func Handler(s *server.Server, opts HandlerOptions) http.Handler {
	return NewHandler(ForServer(s), opts)
}
