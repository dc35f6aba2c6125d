package server

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync/internal/codec"
)

// routes.go holds what the planner needs of the table options beyond a
// row's own route: Follows (a row held wherever the row its column points
// at is held), Active (only the rows a view shows are held) and Retired (a
// retired row is held nowhere new).

// activeView is the Active view's quoted, qualified name.
func (t *table) activeView() string {
	return codec.QuoteIdent(t.active[0]) + "." + codec.QuoteIdent(t.active[1])
}

// parentKeyOf is the canonical key of the row a follower's column value
// points at; ok is false for NULL, which points at nothing.
func (t *table) parentKeyOf(raw any) (key []byte, ok bool, err error) {
	if raw == nil {
		return nil, false, nil
	}
	pc := t.parent.tc.Columns[t.parent.tc.KeyIndex[0]]
	v, err := pc.Canonical(raw)
	if err != nil {
		return nil, false, fmt.Errorf("column %q (Follows): %w", t.routeCol, err)
	}
	return []byte(codec.KeyOfValues(v)), true, nil
}

// planOrder lists the catalogs as the planner plans them: every followed
// catalog before its followers, so that a follower is planned against its
// parent's group as this pass left it; then the wishes table.
func (m *model) planOrder() []*table {
	var out []*table
	placed := map[*table]bool{}
	var place func(t *table)
	place = func(t *table) {
		if placed[t] {
			return
		}
		placed[t] = true
		if t.parent != nil {
			place(t.parent)
		}
		out = append(out, t)
	}
	for _, t := range m.catalogs() {
		place(t)
	}
	return out
}

// resolveFollows finds the catalog each Follows route points at, from the
// foreign key of its column, and refuses what cannot be planned: a column
// without such a key, a key to a table that is not a declared catalog or
// not to its key, and chains that come back on themselves. It returns the
// problems found.
func (s *Server) resolveFollows(ctx context.Context) ([]string, error) {
	var problems []string
	for _, t := range s.m.tables {
		if !t.catalog || t.route != codec.RouteFollows || t.followCol < 0 {
			continue
		}
		var refSchema, refTable string
		var refCols []string
		err := s.pool.QueryRow(ctx, qFollowedBy, t.qname, t.routeCol).Scan(&refSchema, &refTable, &refCols)
		if err == pgx.ErrNoRows {
			problems = append(problems, fmt.Sprintf("table %s: Follows(%q) needs a foreign key from %q to the catalog it follows, which names the row each row follows: add one, e.g. ALTER TABLE %s ADD FOREIGN KEY (%s) REFERENCES <schema>.<catalog> (<key>)",
				t.qname, t.routeCol, t.routeCol, t.qname, codec.QuoteIdent(t.routeCol)))
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("magicsync/server: reading the foreign keys of %s: %w", t.qname, err)
		}
		var parent *table
		for _, p := range s.m.tables {
			if p.tc.Schema == refSchema && p.tc.Name == refTable {
				parent = p
			}
		}
		ref := codec.QuoteIdent(refSchema) + "." + codec.QuoteIdent(refTable)
		switch {
		case parent == nil || !parent.catalog:
			problems = append(problems, fmt.Sprintf("table %s: Follows(%q): its foreign key points at %s, which is not a declared catalog: declare it as a catalog, or route %s otherwise",
				t.qname, t.routeCol, ref, t.name))
			continue
		case len(parent.tc.KeyIndex) != 1 || !slices.Equal(refCols, parent.tc.ColumnNames(parent.tc.KeyIndex)):
			problems = append(problems, fmt.Sprintf("table %s: Follows(%q): its foreign key points at %s (%s), not at that catalog's key (%s): a row follows the row whose one-column key its column holds",
				t.qname, t.routeCol, ref, strings.Join(refCols, ", "), strings.Join(parent.tc.ColumnNames(parent.tc.KeyIndex), ", ")))
			continue
		}
		t.parent = parent
	}
	// A chain that comes back on itself would hold its rows nowhere, or
	// wherever they were: refuse it, naming it once.
	for _, t := range s.m.tables {
		chain := []*table{t}
		for p := t.parent; p != nil && len(chain) <= len(s.m.tables); p = p.parent {
			chain = append(chain, p)
			if p != t {
				continue
			}
			names := make([]string, len(chain))
			for i, c := range chain {
				names[i] = c.name
			}
			problems = append(problems, fmt.Sprintf("the Follows routes form a cycle (%s): its rows would be held wherever they are held; route one of them Broadcast, Assigned or Grouped",
				strings.Join(names, " follows ")))
			for _, c := range chain {
				c.parent = nil
			}
			break
		}
	}
	for _, t := range s.m.tables {
		if t.parent != nil && !slices.Contains(t.parent.followers, t) {
			t.parent.followers = append(t.parent.followers, t)
		}
	}
	return problems, nil
}

// checkActive checks an Active view and the tables ActiveReads names: the
// view shows the table's key columns, each table has the columns named.
func (s *Server) checkActive(ctx context.Context, t *table) ([]string, error) {
	var problems []string
	if t.active[1] == "" {
		return nil, nil
	}
	cols, ok, err := s.tableColumns(ctx, t.active[0], t.active[1])
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: reading view %s: %w", t.activeView(), err)
	}
	if !ok {
		return []string{fmt.Sprintf("table %s: its Active view %s does not exist: create it (it shows the rows replicas hold, with the key columns %s)",
			t.qname, t.activeView(), strings.Join(t.tc.ColumnNames(t.tc.KeyIndex), ", "))}, nil
	}
	for _, k := range t.tc.ColumnNames(t.tc.KeyIndex) {
		if _, ok := cols[k]; !ok {
			problems = append(problems, fmt.Sprintf("table %s: its Active view %s has no column %q: the view must show the table's key columns under their names", t.qname, t.activeView(), k))
		}
	}
	for _, r := range t.reads {
		rq := codec.QuoteIdent(r.Schema) + "." + codec.QuoteIdent(r.Table)
		rcols, ok, err := s.tableColumns(ctx, r.Schema, r.Table)
		if err != nil {
			return nil, fmt.Errorf("magicsync/server: reading table %s: %w", rq, err)
		}
		if !ok {
			problems = append(problems, fmt.Sprintf("table %s: ActiveReads names %s, which does not exist: create it, or drop it from ActiveReads", t.qname, rq))
			continue
		}
		for _, c := range r.Columns {
			if _, ok := rcols[c]; !ok {
				problems = append(problems, fmt.Sprintf("table %s: ActiveReads names column %q of %s, which it does not have", t.qname, c, rq))
			}
		}
	}
	return problems, nil
}

// touchFollowers notes, for the pass to plan next, the rows of t's
// followers that point at the given rows of t: rows whose group this pass
// changed (moved, gone, arrived), which their followers' groups follow.
// It costs the followers of those rows alone. The pass owes them (p.owe):
// it plans them all, however many.
func (s *Server) touchFollowers(ctx context.Context, tx pgx.Tx, t *table, keys [][]byte, p *passState) error {
	if len(t.followers) == 0 || len(keys) == 0 {
		return nil
	}
	args, err := t.keyArrays(keys)
	if err != nil {
		return err
	}
	for _, f := range t.followers {
		var upto int64
		if err := tx.QueryRow(ctx, s.sql.touchFollowers(t, f), args[0], f.name).Scan(&upto); err != nil {
			return fmt.Errorf("noting the followers %s of %s: %w", f.qname, t.qname, err)
		}
		if upto > 0 {
			p.owe(f.name, upto)
		}
	}
	return nil
}
