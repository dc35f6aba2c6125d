package dashboard

import (
	"errors"
	"net/http"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/server"
)

// A page asked of a table that is no setting table is the request's fault,
// not the database's: it is answered 404 in plain words, and the database
// is not marked unreachable. Only a failure to read what exists is an
// outage.

// noSetting says whether err, from asking the Source of a setting table,
// says the name is wrong — no declared table, or one that is no setting —
// rather than that the database failed.
func noSetting(err error) bool {
	return errors.Is(err, magicsync.ErrNotDeclared) || errors.Is(err, server.ErrNotASetting)
}

// noSettingView is the page of a table name that names no setting table.
func (h *handler) noSettingView(v view, table string) view {
	v.Code = http.StatusNotFound
	v.Title = "No such setting · " + h.title
	v.Parts = []part{h.render("nosetting", true, "nosetting", struct{ Table, Server string }{table, h.words.Server})}
	return v
}
