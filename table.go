// This file holds the declarations a host writes: Table, its mirrors,
// strategies and routes, and the Declarer its row types implement.

package magicsync

import "github.com/magicsync/magicsync/internal/codec"

// Mirror says which side writes a table and how it travels.
type Mirror uint8

const (
	// Catalog is a table the server writes and replicas hold read-only:
	// products, prices. A replica holds the rows its route gives it.
	Catalog Mirror = iota + 1
	// Record is a table a replica writes and the server files: receipts,
	// readings. Its Origin column names the writing replica; the newer
	// version wins.
	Record
	// Setting is a record with desired columns that the server may wish
	// other values (the device twin). The replica carries a wish out,
	// refuses it, or has it wait.
	Setting
)

// String names the mirror as it is spelled in declarations.
func (m Mirror) String() string {
	return codec.Mirror(m).String()
}

// Strategy says when a replica carries out a wish of a setting.
type Strategy uint8

const (
	// Always carries every wish out: the last wish wins over a change the
	// replica made before it arrived. It is the zero value.
	Always Strategy = iota
	// IfUnchanged carries a wish out only while the replica still holds the
	// version the wish was based on; otherwise the wish is superseded and
	// the replica's value stands.
	IfUnchanged
)

// String names the strategy.
func (s Strategy) String() string {
	return codec.Strategy(s).String()
}

// RouteKind says how a catalog's rows are spread over replicas.
type RouteKind uint8

const (
	// RouteDefault is the zero Route; a catalog with it is broadcast.
	RouteDefault RouteKind = iota
	// RouteBroadcast sends every row to every replica.
	RouteBroadcast
	// RouteAssigned sends a row to the one replica its column names.
	RouteAssigned
	// RouteGrouped sends a row to every member of the group its column names.
	RouteGrouped
	// RouteFollows holds a row wherever the row its column points at is held.
	RouteFollows
)

// String names the route kind.
func (k RouteKind) String() string {
	return codec.RouteKind(k).String()
}

// Route says which replicas hold each row of a catalog. Build one with
// Broadcast, Assigned, Grouped or Follows; the zero Route broadcasts.
type Route struct {
	kind    RouteKind
	column  string
	members string
}

// Broadcast routes every row to every replica.
func Broadcast() Route { return Route{kind: RouteBroadcast} }

// Assigned routes each row to the one replica whose id its column (a UUID)
// holds. Changing the column moves the row from one replica to the other.
func Assigned(column string) Route { return Route{kind: RouteAssigned, column: column} }

// Grouped routes each row to every member of the group its column names.
// members names the host table that puts replicas in groups, as
// "schema.table(replica_column, group_column)", for example
// "shop.registers(id, shop_id)". A replica changing group gains the new
// group's rows and lets go of the old group's.
func Grouped(members, column string) Route {
	return Route{kind: RouteGrouped, column: column, members: members}
}

// Follows holds each row wherever the row of another catalog that its
// column points at is held: a product's images follow the product.
func Follows(column string) Route { return Route{kind: RouteFollows, column: column} }

// Kind says how the route spreads rows.
func (r Route) Kind() RouteKind { return r.kind }

// Column is the column the route reads: the replica id of Assigned, the
// group of Grouped, the reference of Follows. It is empty for Broadcast.
func (r Route) Column() string { return r.column }

// Members is the group-membership table of a Grouped route, as declared.
func (r Route) Members() string { return r.members }

// String writes the route as it would be declared.
func (r Route) String() string {
	return codec.NewRoute(codec.RouteKind(r.kind), r.column, r.members).String()
}

// Table is what a row type declares of its table through its SyncTable
// method. Only Name and Mirror are required.
type Table struct {
	// Schema is the table's PostgreSQL schema; empty means "public". The
	// replica's SQLite table has the same Name, without schema.
	Schema string
	// Name is the table's name on both sides. It may not begin "sync_":
	// those names are the engine's.
	Name string
	// Mirror says which side writes the table.
	Mirror Mirror
	// Key lists the key columns in order. Empty means the fields tagged
	// sync:"key", in field order, or else the column "id".
	Key []string
	// Origin names the key column that holds the writing replica's id. A
	// Record or Setting must have one.
	Origin string
	// Sync routes a Catalog's rows to replicas; the zero Route broadcasts.
	Sync Route
	// Active names a view (schema.view, or view in the table's schema)
	// showing the rows replicas should hold; a row leaving it is let go.
	// Catalogs only. Each part is checked as the other names are: not
	// empty, at most 63 bytes, no quote, control character or invalid
	// UTF-8.
	Active string
	// ActiveReads lists the other host tables the Active view reads, each
	// as "schema.table(col, ...)" naming the columns of that table holding
	// this table's key, in key order: e.g. "shop.promotions(product_id)"
	// for a view of the products a promotion puts on sale. The server's
	// triggers on those tables note the keys their writes name, so that a
	// row entering or leaving the view by a change to another table is
	// planned like a change to the row itself. Catalogs with Active only.
	ActiveReads []string
	// Retired names a boolean column: a retired row goes to no replica that
	// lacks it, and is kept only while a replica's row points at it.
	Retired string
	// Unmirrored lists server columns the row type leaves out on purpose,
	// so that the server's schema check does not ask for them.
	Unmirrored []string
	// Apply says when a replica carries out a wish. Settings only.
	Apply Strategy
}

// Declarer is a row type: a struct that declares its table.
type Declarer interface {
	SyncTable() Table
}
