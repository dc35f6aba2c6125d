package server

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/wire"
)

// sqlgen.go builds the SQL generated at run time for the host's tables:
// the fragments (column expressions, select lists and casts, key joins,
// the route expression, what a row needs to be held, quoting), the
// statements on one host table (reading rows by key or by replica,
// filing and deleting them, matching a rollout's rows), and the engine's
// templates (queries.go's ...Fmt) filled in with the host's names, and
// the triggers' functions and triggers (Triggers), the notes CaptureLogical
// writes of the rows it reads, and the publication (Publication). (The
// engine's fixed statements are queries.go's.)

// colExpr is the SQL reading column i of alias, in a form Canonical reads.
func (t *table) colExpr(alias string, i int) string {
	c := t.tc.Columns[i]
	e := alias + "." + codec.QuoteIdent(c.Name)
	switch c.Kind {
	case wire.Decimal:
		return e + "::text"
	case wire.Float:
		return e + "::float8"
	}
	return e
}

// selectList is the SQL reading the columns of idx of alias, in order.
func (t *table) selectList(alias string, idx []int) string {
	parts := make([]string, len(idx))
	for i, j := range idx {
		parts[i] = t.colExpr(alias, j)
	}
	return strings.Join(parts, ", ")
}

// castOf is the SQL cast of a bound text to column i's type.
func (t *table) castOf(i int) string {
	if t.pgType == nil || t.pgType[i] == "" {
		return ""
	}
	return "::" + t.pgType[i]
}

// keyJoin joins host alias h to the key arrays unnested as k(c0, c1, ...).
func (t *table) keyJoin() (unnest string, on string) {
	var args, names, conds []string
	for n, i := range t.tc.KeyIndex {
		args = append(args, fmt.Sprintf("$%d::text[]", n+1))
		names = append(names, fmt.Sprintf("c%d", n))
		conds = append(conds, fmt.Sprintf("h.%s = k.c%d%s", codec.QuoteIdent(t.tc.Columns[i].Name), n, t.castOf(i)))
	}
	return fmt.Sprintf("unnest(%s) AS k(%s)", strings.Join(args, ", "), strings.Join(names, ", ")), strings.Join(conds, " AND ")
}

// routeExpr is the SQL (over alias h) of a row's route value as text.
// For Follows it is the column itself, which reads as the parent's key.
func (t *table) routeExpr() string {
	switch t.route {
	case codec.RouteAssigned, codec.RouteGrouped:
		return "h." + codec.QuoteIdent(t.routeCol) + "::text"
	case codec.RouteFollows:
		return t.colExpr("h", t.followCol)
	}
	return "NULL::text"
}

// heldFilter is the SQL condition (over alias h, a row of the table) that
// the row is to be held at all: shown by the Active view, not retired. It
// is "" when the table declares neither.
func (t *table) heldFilter(h string) string {
	var conds []string
	if t.retired != "" {
		conds = append(conds, h+"."+codec.QuoteIdent(t.retired)+" IS NOT TRUE")
	}
	if t.active[1] != "" {
		var on []string
		for _, i := range t.tc.KeyIndex {
			q := codec.QuoteIdent(t.tc.Columns[i].Name)
			on = append(on, "v."+q+" = "+h+"."+q)
		}
		conds = append(conds, fmt.Sprintf("EXISTS (SELECT 1 FROM %s v WHERE %s)", t.activeView(), strings.Join(on, " AND ")))
	}
	return strings.Join(conds, " AND ")
}

// presentExpr is the SQL (over alias h, a LEFT JOINed row of the table) of
// whether the row exists and is to be held.
func (t *table) presentExpr(h string) string {
	e := h + ".ctid IS NOT NULL"
	if f := t.heldFilter(h); f != "" {
		e += " AND " + f
	}
	return e
}

// quoteList quotes identifiers and joins them with commas.
func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = codec.QuoteIdent(n)
	}
	return strings.Join(q, ", ")
}

// quoteIdentPlain quotes an identifier, as for LISTEN.
func quoteIdentPlain(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// quoteLiteral quotes a string as an SQL literal.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// The statements on one host table, per table.

// selectOwnRows is the statement reading the columns of idx of one
// replica's rows of the table: those whose origin column holds $1.
func (t *table) selectOwnRows(idx []int) string {
	origin := codec.QuoteIdent(t.tc.Columns[t.tc.OriginIndex].Name)
	return fmt.Sprintf("SELECT %s FROM %s h WHERE h.%s = $1", t.selectList("h", idx), t.qname, origin)
}

// selectFirstRows is the statement reading the columns of idx of the
// table's first rows by origin, at most limit.
func (t *table) selectFirstRows(idx []int, limit int) string {
	origin := codec.QuoteIdent(t.tc.Columns[t.tc.OriginIndex].Name)
	return fmt.Sprintf("SELECT %s FROM %s h ORDER BY h.%s LIMIT %d", t.selectList("h", idx), t.qname, origin, limit)
}

// selectByKeys is the statement reading the columns of idx of the rows
// whose keys the key arrays hold (keyArrays, keyJoin); with held, only
// those to be held (heldFilter).
func (t *table) selectByKeys(idx []int, held bool) string {
	un, on := t.keyJoin()
	if f := t.heldFilter("h"); held && f != "" {
		on += " AND " + f
	}
	return fmt.Sprintf("SELECT %s FROM %s JOIN %s h ON %s", t.selectList("h", idx), un, t.qname, on)
}

// deleteByKeys is the statement deleting the rows whose keys the key
// arrays hold (keyArrays, keyJoin).
func (t *table) deleteByKeys() string {
	un, on := t.keyJoin()
	return fmt.Sprintf("DELETE FROM %s h USING %s WHERE %s", t.qname, un, on)
}

// upsertRows is the statement filing rows in one go: the columns
// pos[filedCols[n]], each from the text array $n+1, cast to its type. A
// row whose key exists updates it, but its key and created columns, and
// only when newer by the version column, unless the replica sends again
// after a provisioning (resent); a table of nothing else to update does
// nothing.
func (t *table) upsertRows(pos, filedCols []int, resent bool) string {
	tc := t.tc
	var names, args, sel, sets []string
	for n, mi := range filedCols {
		c := tc.Columns[pos[mi]]
		q := codec.QuoteIdent(c.Name)
		names = append(names, q)
		args = append(args, fmt.Sprintf("$%d::text[]", n+1))
		sel = append(sel, fmt.Sprintf("u.c%d%s", n, t.castOf(pos[mi])))
		if !c.Key && !c.Created {
			sets = append(sets, q+" = excluded."+q)
		}
	}
	aliases := make([]string, len(filedCols))
	for n := range aliases {
		aliases[n] = fmt.Sprintf("c%d", n)
	}
	conflict := "DO NOTHING"
	if len(sets) > 0 {
		conflict = "DO UPDATE SET " + strings.Join(sets, ", ")
		if !resent && tc.VersionIndex >= 0 {
			v := codec.QuoteIdent(tc.Columns[tc.VersionIndex].Name)
			conflict += " WHERE h." + v + " < excluded." + v
		}
	}
	return fmt.Sprintf("INSERT INTO %s AS h (%s) SELECT %s FROM unnest(%s) AS u(%s) ON CONFLICT (%s) %s",
		t.qname, strings.Join(names, ", "), strings.Join(sel, ", "), strings.Join(args, ", "), strings.Join(aliases, ", "),
		quoteList(tc.ColumnNames(tc.KeyIndex)), conflict)
}

// selectMatching is the statement reading the keys of the rows of the
// replicas $1 whose columns cols hold given values: NULL where null says
// so, else the next parameter ($2, $3 ...), a text cast to the column's
// type.
func (t *table) selectMatching(cols []int, null []bool) string {
	tc := t.tc
	conds := []string{fmt.Sprintf("h.%s = ANY($1::uuid[])", codec.QuoteIdent(tc.Columns[tc.OriginIndex].Name))}
	param := 1
	for n, i := range cols {
		col := codec.QuoteIdent(tc.Columns[i].Name)
		if null[n] {
			conds = append(conds, "h."+col+" IS NULL")
			continue
		}
		param++
		conds = append(conds, fmt.Sprintf("h.%s = $%d::text%s", col, param, t.castOf(i)))
	}
	return fmt.Sprintf("SELECT %s FROM %s h WHERE %s", t.selectList("h", tc.KeyIndex), t.qname, strings.Join(conds, " AND "))
}

// selectGroups is the statement reading, for the replicas $1, the groups
// the members table names them in (as text; NULL names none).
func (mb members) selectGroups() string {
	r, g := codec.QuoteIdent(mb.Replica), codec.QuoteIdent(mb.Group)
	return fmt.Sprintf(`SELECT m.%s, m.%s::text FROM %s m WHERE m.%s = ANY($1) AND m.%s IS NOT NULL`, r, g, mb.qname(), r, g)
}

// The engine's statements that name the host's tables: its templates
// (queries.go, named ...Fmt) filled in with the tables' names.

// onReplicas is template (qAdoptAllFmt, qReadCredsFmt ...) over the
// replicas table: its name, then its id column.
func (st *statements) onReplicas(template string, rt replicasTable) string {
	return fmt.Sprintf(st.of(template), rt.qname(), codec.QuoteIdent(rt.column))
}

// takeTouched is the pass's statement taking a batch of t's noted keys
// ($1: the table's name; $2: the batch's size) with each row as it is
// now: its key, whether it is there to be held, its down columns and its
// route value. The batch is taken as a range of ids (the first passBatch
// of the table's), not as "id IN (SELECT ... LIMIT)": sync_touched is a
// queue, empty whenever statistics are gathered, and on an estimate of
// one row PostgreSQL plans the IN as a nested loop that runs the LIMIT
// subquery once per row — quadratic: 37 s for a 10,000-row UPDATE.
func (st *statements) takeTouched(t *table) string {
	var keyCols, conds []string
	for _, i := range t.tc.KeyIndex {
		q := codec.QuoteIdent(t.tc.Columns[i].Name)
		keyCols = append(keyCols, t.colExpr("r", i))
		conds = append(conds, "h."+q+" = r."+q)
	}
	return fmt.Sprintf(st.of(qTakeTouchedFmt),
		strings.Join(keyCols, ", "), t.presentExpr("h"), t.selectList("h", t.down), t.routeExpr(), t.qname, t.qname, strings.Join(conds, " AND "))
}

// touchFollowers is the statement noting the rows of follower f that
// point at the keys $1 of t (text, cast to the type of t's key), under
// f's name ($2) (qTouchFollowersFmt).
func (st *statements) touchFollowers(t, f *table) string {
	fk := f.tc.ColumnNames(f.tc.KeyIndex)
	n := note{label: f.name, cols: fk, as: fk}
	return fmt.Sprintf(st.of(qTouchFollowersFmt), n.expr("f"), f.qname, codec.QuoteIdent(f.routeCol), t.pgType[t.tc.KeyIndex[0]])
}

// The triggers' SQL (Triggers): each host table's function and
// triggers, noting in sync_touched the keys its rows name.

// expr is the SQL of the key a note takes of the row of alias, as jsonb.
func (n note) expr(alias string) string {
	parts := make([]string, len(n.cols))
	for i, c := range n.cols {
		parts[i] = quoteLiteral(n.as[i]) + ", " + alias + "." + codec.QuoteIdent(c)
	}
	return "jsonb_build_object(" + strings.Join(parts, ", ") + ")"
}

// sql writes the function and triggers of one table, and returns their
// version hash.
func (ts *triggerSet) sql() (string, string) {
	body, h := ts.body()
	tag := "$sync_" + h + "$"
	fn := ts.engine.sql + "." + codec.QuoteIdent("sync_fn_"+h)
	q := ts.qname()
	names := ts.triggerNames(h)
	var b strings.Builder
	fmt.Fprintf(&b, "-- magicsync: note every key written to %s (version %s)\n", q, h)
	fmt.Fprintf(&b, "CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS %s\n%s\n%s;\n", fn, tag, body, tag)
	fmt.Fprintf(&b, "COMMENT ON FUNCTION %s() IS %s;\n", fn, quoteLiteral("magicsync/server: notes the keys written to "+q+"; version "+h))
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = quoteLiteral(n)
	}
	fmt.Fprintf(&b, `DO %s
DECLARE t text;
BEGIN
  FOR t IN SELECT tgname FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal
      AND tgname LIKE 'sync\_%%' AND tgname NOT IN (%s) LOOP
    EXECUTE format('DROP TRIGGER %%I ON %%s', t, %s);
  END LOOP;
END %s;
`, tag, quoteLiteral(q), strings.Join(quoted, ", "), quoteLiteral(q), tag)
	ddl := []string{
		"AFTER INSERT ON %s REFERENCING NEW TABLE AS sync_new FOR EACH STATEMENT",
		"AFTER UPDATE ON %s REFERENCING OLD TABLE AS sync_old NEW TABLE AS sync_new FOR EACH STATEMENT",
		"AFTER DELETE ON %s REFERENCING OLD TABLE AS sync_old FOR EACH STATEMENT",
		"BEFORE TRUNCATE ON %s FOR EACH STATEMENT",
	}
	for i, n := range names {
		fmt.Fprintf(&b, "DROP TRIGGER IF EXISTS %s ON %s;\n", codec.QuoteIdent(n), q)
		fmt.Fprintf(&b, "CREATE TRIGGER %s "+ddl[i]+" EXECUTE FUNCTION %s();\n", codec.QuoteIdent(n), q, fn)
	}
	return b.String(), h
}

// triggerBody is the template of a trigger function's body: the notes of
// the rows inserted, of those updated (before and after), of those deleted
// and of those a TRUNCATE removes. It notifies nobody: a notifying commit
// holds PostgreSQL's cluster-wide notify lock through its WAL flush, which
// made the host's writing transactions commit one at a time. Run learns of
// the notes by reading sync_touched's sequence instead (watch).
const triggerBody = `BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO {schema}.sync_touched (tbl, key) %s;
  ELSIF TG_OP = 'UPDATE' THEN
    INSERT INTO {schema}.sync_touched (tbl, key) SELECT DISTINCT tbl, key FROM (%s UNION ALL %s) AS sync_keys;
  ELSIF TG_OP = 'DELETE' THEN
    INSERT INTO {schema}.sync_touched (tbl, key) %s;
  ELSIF TG_OP = 'TRUNCATE' THEN
    INSERT INTO {schema}.sync_touched (tbl, key) %s;
  END IF;
  RETURN NULL;
END`

// noteSelect is the SELECT of the notes (tbl, key) of the rows of from,
// under alias: every note of the table of each row.
func (ts *triggerSet) noteSelect(alias, from string) string {
	var parts []string
	for _, n := range ts.notes {
		part := fmt.Sprintf("SELECT %s AS tbl, %s AS key FROM %s %s", quoteLiteral(n.label), n.expr(alias), from, alias)
		if n.someKey {
			nonNull := make([]string, len(n.cols))
			for i, c := range n.cols {
				nonNull[i] = alias + "." + codec.QuoteIdent(c) + " IS NOT NULL"
			}
			part += " WHERE " + strings.Join(nonNull, " AND ")
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, " UNION ALL ")
}

// noteRowsSQL is the statement CaptureLogical notes rows of the table
// with, as its triggers note them: $1 is a JSON array of the rows, each an
// object of its columns' text (as PostgreSQL's logical replication sends
// them), typed by the table's own columns so that the keys noted are the
// triggers' to the byte. It returns the highest id noted (0 for none).
func (ts *triggerSet) noteRowsSQL() string {
	return "WITH n AS (INSERT INTO " + ts.engine.sql + ".sync_touched (tbl, key) " +
		ts.noteSelect("r", "jsonb_populate_recordset(NULL::"+ts.qname()+", $1::jsonb)") +
		" RETURNING id) SELECT coalesce(max(id), 0) FROM n"
}

// seedSQL is the statement noting every row of the table, as a TRUNCATE's
// trigger does: CaptureLogical runs it when its slot begins, so that the
// rows written before are planned too.
func (ts *triggerSet) seedSQL() string {
	return "INSERT INTO " + ts.engine.sql + ".sync_touched (tbl, key) " + ts.noteSelect("x", ts.qname())
}

// body is the trigger function's body, and its version hash.
func (ts *triggerSet) body() (string, string) {
	sel := ts.noteSelect
	body := fmt.Sprintf(ts.engine.render(triggerBody), sel("n", "sync_new"), sel("n", "sync_new"), sel("o", "sync_old"), sel("o", "sync_old"), sel("x", ts.qname()))
	sum := sha256.Sum256([]byte(ts.qname() + "\n" + body))
	return body, hex.EncodeToString(sum[:8])
}

// dropOrphans removes, from the engine's schema, trigger functions of earlier versions no trigger uses.
const dropOrphans = `DO $sync_orphans$
DECLARE f regprocedure;
BEGIN
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
      WHERE p.pronamespace = '{schema}'::regnamespace AND p.proname LIKE 'sync\_fn\_%'
      AND NOT EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgfoid = p.oid) LOOP
    EXECUTE 'DROP FUNCTION ' || f::text;
  END LOOP;
END $sync_orphans$;
`

// publicationSQL is Publication's SQL for m.
func (m *model) publicationSQL() string {
	var tables, full []string
	for _, ts := range m.triggerSets() {
		tables = append(tables, ts.qname())
		if m.fullIdentity(ts) {
			full = append(full, ts.qname())
		}
	}
	pub := codec.QuoteIdent(m.engine.publicationName())
	list := strings.Join(tables, ", ")
	var b strings.Builder
	fmt.Fprintf(&b, "-- magicsync: the publication Run reads the changes of (Capture: CaptureLogical)\n")
	fmt.Fprintf(&b, "DO $sync$ BEGIN\n  IF EXISTS (SELECT 1 FROM pg_publication WHERE pubname = %s) THEN\n    ALTER PUBLICATION %s SET TABLE %s;\n  ELSE\n    CREATE PUBLICATION %s FOR TABLE %s;\n  END IF;\nEND $sync$;\n",
		quoteLiteral(m.engine.publicationName()), pub, list, pub, list)
	for _, q := range full {
		fmt.Fprintf(&b, "DO $sync$ BEGIN\n  IF (SELECT relreplident FROM pg_class WHERE oid = %s::regclass) <> 'f' THEN\n    ALTER TABLE %s REPLICA IDENTITY FULL;\n  END IF;\nEND $sync$;\n", quoteLiteral(q), q)
	}
	return b.String()
}
