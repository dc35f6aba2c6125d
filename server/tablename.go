package server

import (
	"fmt"
	"strings"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
)

// settingNamed returns the declared setting table that name names: by its
// name on the replicas ("footers") or by its qualified name on the server
// ("shop.footers"). A name the declarations do not know is refused with an
// error wrapping magicsync.ErrNotDeclared, the name of a table that is no
// setting with one wrapping ErrNotASetting: the caller's input is wrong,
// and nothing was asked of the database.
func (s *Server) settingNamed(name string) (*table, error) {
	t := s.m.byName[name]
	if t == nil {
		if schema, bare, ok := strings.Cut(name, "."); ok {
			if q := s.m.byName[bare]; q != nil && q.tc.Schema == schema && !s.m.engineTable(q) {
				t = q
			}
		}
	}
	switch {
	case t == nil || s.m.engineTable(t):
		return nil, fmt.Errorf("%w: no declared table is named %q; name a setting table as its replicas do (e.g. %q) or with its schema", magicsync.ErrNotDeclared, name, s.someSetting())
	case t.tc.Mirror != codec.Setting:
		return nil, fmt.Errorf("%w: %q is a %v, no setting table", ErrNotASetting, name, t.tc.Mirror)
	}
	return t, nil
}

// someSetting names a declared setting table, for an example in an error;
// "settings" without one.
func (s *Server) someSetting() string {
	for _, t := range s.m.tables {
		if t.tc.Mirror == codec.Setting {
			return t.name
		}
	}
	return "settings"
}
