// This file holds the declarations a host writes: Table, its mirrors,
// strategies and routes, and the Declarer its row types implement. They
// are defined once, in internal/codec, where the engines read them; these
// are the names a host writes.

package magicsync

import "github.com/magicsync/magicsync/internal/codec"

// Mirror says which side writes a table and how it travels: Catalog,
// Record or Setting. Its String is the name a declaration spells.
type Mirror = codec.Mirror

const (
	// Catalog is a table the server writes and replicas hold read-only:
	// products, prices. A replica holds the rows its route gives it.
	Catalog = codec.Catalog
	// Record is a table a replica writes and the server files: receipts,
	// readings. Its Origin column names the writing replica; the newer
	// version wins.
	Record = codec.Record
	// Setting is a record with desired columns that the server may wish
	// other values (the device twin). The replica carries a wish out,
	// refuses it, or has it wait.
	Setting = codec.Setting
)

// Strategy says when a replica carries out a wish of a setting: Always
// (the zero value) or IfUnchanged.
type Strategy = codec.Strategy

const (
	// Always carries every wish out: the last wish wins over a change the
	// replica made before it arrived. It is the zero value.
	Always = codec.Always
	// IfUnchanged carries a wish out only while the replica still holds the
	// version the wish was based on; otherwise the wish is superseded and
	// the replica's value stands.
	IfUnchanged = codec.IfUnchanged
)

// RouteKind says how a catalog's rows are spread over replicas: what
// Route.Kind returns.
type RouteKind = codec.RouteKind

const (
	// RouteDefault is the zero Route; a catalog with it is broadcast.
	RouteDefault = codec.RouteDefault
	// RouteBroadcast sends every row to every replica.
	RouteBroadcast = codec.RouteBroadcast
	// RouteAssigned sends a row to the one replica its column names.
	RouteAssigned = codec.RouteAssigned
	// RouteGrouped sends a row to every member of the group its column
	// names.
	RouteGrouped = codec.RouteGrouped
	// RouteFollows holds a row wherever the row its column points at is
	// held.
	RouteFollows = codec.RouteFollows
)

// Route says which replicas hold each row of a catalog. Build one with
// Broadcast, Assigned, Grouped or Follows; the zero Route broadcasts. Its
// Kind, Column and Members say what it was built with; its String writes
// it as it would be declared.
type Route = codec.Route

// Broadcast routes every row to every replica.
func Broadcast() Route { return codec.NewRoute(RouteBroadcast, "", "") }

// Assigned routes each row to the one replica whose id its column (a UUID)
// holds. Changing the column moves the row from one replica to the other.
func Assigned(column string) Route { return codec.NewRoute(RouteAssigned, column, "") }

// Grouped routes each row to every member of the group its column names.
// members names the host table that puts replicas in groups, as
// "schema.table(replica_column, group_column)", for example
// "shop.registers(id, shop_id)". A replica changing group gains the new
// group's rows and lets go of the old group's.
func Grouped(members, column string) Route {
	return codec.NewRoute(RouteGrouped, column, members)
}

// Follows holds each row wherever the row of another catalog that its
// column points at is held: a product's images follow the product.
func Follows(column string) Route { return codec.NewRoute(RouteFollows, column, "") }

// Table is what a row type declares of its table through its SyncTable
// method. Only Name and Mirror are required; its fields:
//
//   - Schema: the table's PostgreSQL schema; empty means "public". The
//     replica's SQLite table has the same Name, without schema.
//   - Name: the table's name on both sides; not "sync_…", the engine's.
//   - Mirror: which side writes the table.
//   - Key: the key columns in order; empty means the fields tagged
//     sync:"key", in field order, or else the column "id".
//   - Origin: the key column holding the writing replica's id; a Record
//     or Setting must have one.
//   - Sync: how a Catalog's rows are routed to replicas; the zero Route
//     broadcasts.
//   - Active: a view showing the rows replicas should hold (catalogs);
//     ActiveReads, the other tables it reads, as
//     "schema.table(col, ...)" naming the columns holding this table's key.
//   - Retired: a boolean column; a retired row goes to no replica that
//     lacks it, and is kept only while a replica's row points at it.
//   - Unmirrored: server columns the row type leaves out on purpose.
//   - Apply: when a replica carries out a wish (settings).
//
// Each field is documented in full on internal/codec's Table, where the
// engines read it.
type Table = codec.Table

// Declarer is a row type: a struct that declares its table.
type Declarer interface {
	SyncTable() Table
}
