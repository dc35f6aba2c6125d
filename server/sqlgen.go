package server

import (
	"fmt"
	"strings"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/wire"
)

// sqlgen.go holds the SQL fragments generated for the host's tables: column
// expressions, select lists and casts, key joins, the route expression, and
// quoting. (The triggers' SQL is triggers.go's; the engine's own statements
// are queries.go's.)

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
