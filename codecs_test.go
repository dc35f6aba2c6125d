// This file holds the tests of NewCodecs: each rule it refuses, what it
// accepts and normalises, and the routes.

package magicsync_test

import (
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/shoptest"
)

// The row types below each break one rule of NewCodecs (see DESIGN.md,
// "Declaring rows"), and only that one: the tests assert that each gets
// exactly one Problem.

type noName struct {
	ID int64 `db:"id"`
}

func (noName) SyncTable() magicsync.Table { return magicsync.Table{Mirror: magicsync.Catalog} }

type longName struct {
	ID int64 `db:"id"`
}

func (longName) SyncTable() magicsync.Table {
	return magicsync.Table{Name: strings.Repeat("n", 64), Mirror: magicsync.Catalog}
}

type syncPrefixed struct {
	ID int64 `db:"id"`
}

func (syncPrefixed) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "sync_log", Mirror: magicsync.Catalog}
}

type syncPrefixedUpper struct {
	ID int64 `db:"id"`
}

func (syncPrefixedUpper) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "Sync_Log", Mirror: magicsync.Catalog}
}

type itemsInShop struct {
	ID int64 `db:"id"`
}

func (itemsInShop) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "items", Mirror: magicsync.Catalog}
}

type itemsInStock struct {
	ID int64 `db:"id"`
}

func (itemsInStock) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "stock", Name: "items", Mirror: magicsync.Catalog}
}

type columnTwice struct {
	ID    int64  `db:"id"`
	Label string `db:"name"`
	Title string `db:"name"`
}

func (columnTwice) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "column_twice", Mirror: magicsync.Catalog}
}

type stamp struct {
	UpdatedAt time.Time `db:"updated_at" sync:"version"`
}

type columnTwiceEmbedded struct {
	ID int64 `db:"id"`
	stamp
	Changed time.Time `db:"updated_at"`
}

func (columnTwiceEmbedded) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "column_twice_embedded", Mirror: magicsync.Catalog}
}

type keyNoField struct {
	ID   int64  `db:"id"`
	Name string `db:"name"`
}

func (keyNoField) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "key_no_field", Mirror: magicsync.Catalog, Key: []string{"code"}}
}

type noKeyAtAll struct {
	Code string `db:"code"`
}

func (noKeyAtAll) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "no_key_at_all", Mirror: magicsync.Catalog}
}

type keyNullable struct {
	ID *int64 `db:"id" sync:"key"`
}

func (keyNullable) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "key_nullable", Mirror: magicsync.Catalog}
}

type keyNullString struct {
	Code sql.NullString `db:"code"`
}

func (keyNullString) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "key_null_string", Mirror: magicsync.Catalog, Key: []string{"code"}}
}

type keyGenerated struct {
	ID int64 `db:"id" sync:"key,generated"`
}

func (keyGenerated) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "key_generated", Mirror: magicsync.Catalog}
}

type keyReplicaOwned struct {
	ID int64 `db:"id" sync:"key,replica_owned"`
}

func (keyReplicaOwned) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "key_replica_owned", Mirror: magicsync.Catalog}
}

type keyVersion struct {
	ID int64 `db:"id" sync:"key,version"`
}

func (keyVersion) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "key_version", Mirror: magicsync.Catalog}
}

type keyCreated struct {
	ID int64 `db:"id" sync:"key,created"`
}

func (keyCreated) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "key_created", Mirror: magicsync.Catalog}
}

type keyDesired struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	Name       string    `db:"name" sync:"key,desired"`
	Value      string    `db:"value" sync:"desired"`
	ChangedAt  time.Time `db:"changed_at" sync:"version"`
}

func (keyDesired) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "key_desired", Mirror: magicsync.Setting, Origin: "register_id"}
}

type keyTagLeftOut struct {
	ID   int64  `db:"id" sync:"key"`
	Line int64  `db:"line" sync:"key"`
	Text string `db:"text"`
}

func (keyTagLeftOut) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "key_tag_left_out", Mirror: magicsync.Catalog, Key: []string{"id"}}
}

type keyListedTwice struct {
	ID int64 `db:"id"`
}

func (keyListedTwice) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "key_listed_twice", Mirror: magicsync.Catalog, Key: []string{"id", "id"}}
}

type twoVersions struct {
	ID        int64     `db:"id"`
	UpdatedAt time.Time `db:"updated_at" sync:"version"`
	Revision  int64     `db:"revision" sync:"version"`
}

func (twoVersions) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "two_versions", Mirror: magicsync.Catalog}
}

type twoCreated struct {
	ID        int64     `db:"id"`
	CreatedAt time.Time `db:"created_at" sync:"created"`
	FirstSeen time.Time `db:"first_seen" sync:"created"`
}

func (twoCreated) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "two_created", Mirror: magicsync.Catalog}
}

type nullableVersion struct {
	ID        int64      `db:"id"`
	UpdatedAt *time.Time `db:"updated_at" sync:"version"`
}

func (nullableVersion) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "nullable_version", Mirror: magicsync.Catalog}
}

type generatedVersion struct {
	ID        int64     `db:"id"`
	UpdatedAt time.Time `db:"updated_at" sync:"version,generated"`
}

func (generatedVersion) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "generated_version", Mirror: magicsync.Catalog}
}

type generatedCreated struct {
	ID        int64     `db:"id"`
	CreatedAt time.Time `db:"created_at" sync:"generated,created"`
}

func (generatedCreated) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "generated_created", Mirror: magicsync.Catalog}
}

type generatedDesired struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	Name       string    `db:"name" sync:"key"`
	Value      string    `db:"value" sync:"desired,generated"`
	ChangedAt  time.Time `db:"changed_at" sync:"version"`
}

func (generatedDesired) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "generated_desired", Mirror: magicsync.Setting, Origin: "register_id"}
}

type originNotKey struct {
	ID         uuid.UUID `db:"id" sync:"key"`
	RegisterID uuid.UUID `db:"register_id"`
	At         time.Time `db:"at" sync:"version"`
}

func (originNotKey) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "origin_not_key", Mirror: magicsync.Record, Origin: "register_id"}
}

type originNoColumn struct {
	ID uuid.UUID `db:"id" sync:"key"`
}

func (originNoColumn) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "origin_no_column", Mirror: magicsync.Record, Origin: "till"}
}

type originNotUUID struct {
	Till string `db:"till" sync:"key"`
	ID   int64  `db:"id" sync:"key"`
}

func (originNotUUID) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "origin_not_uuid", Mirror: magicsync.Record, Origin: "till"}
}

type recordNoOrigin struct {
	ID uuid.UUID `db:"id"`
}

func (recordNoOrigin) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "record_no_origin", Mirror: magicsync.Record}
}

type settingNoOrigin struct {
	ID        uuid.UUID `db:"id"`
	Value     string    `db:"value" sync:"desired"`
	ChangedAt time.Time `db:"changed_at" sync:"version"`
}

func (settingNoOrigin) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "setting_no_origin", Mirror: magicsync.Setting}
}

type settingNoDesired struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	Name       string    `db:"name" sync:"key"`
	Value      string    `db:"value"`
	ChangedAt  time.Time `db:"changed_at" sync:"version"`
}

func (settingNoDesired) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "setting_no_desired", Mirror: magicsync.Setting, Origin: "register_id"}
}

type settingNoVersion struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	Name       string    `db:"name" sync:"key"`
	Value      string    `db:"value" sync:"desired"`
	ChangedAt  time.Time `db:"changed_at"`
}

func (settingNoVersion) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "setting_no_version", Mirror: magicsync.Setting, Origin: "register_id"}
}

type desiredOnCatalog struct {
	ID    int64  `db:"id"`
	Price int64  `db:"price" sync:"desired"`
	Name  string `db:"name"`
}

func (desiredOnCatalog) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "desired_on_catalog", Mirror: magicsync.Catalog}
}

type desiredOnRecord struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	ID         int64     `db:"id" sync:"key"`
	Total      int64     `db:"total" sync:"desired"`
}

func (desiredOnRecord) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "desired_on_record", Mirror: magicsync.Record, Origin: "register_id"}
}

type applyOnCatalog struct {
	ID int64 `db:"id"`
}

func (applyOnCatalog) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "apply_on_catalog", Mirror: magicsync.Catalog, Apply: magicsync.IfUnchanged}
}

type applyOnRecord struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	ID         int64     `db:"id" sync:"key"`
}

func (applyOnRecord) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "apply_on_record", Mirror: magicsync.Record, Origin: "register_id", Apply: magicsync.IfUnchanged}
}

type activeOnRecord struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	ID         int64     `db:"id" sync:"key"`
}

func (activeOnRecord) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "active_on_record", Mirror: magicsync.Record, Origin: "register_id", Active: "open_receipts"}
}

type activeOnSetting struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	Name       string    `db:"name" sync:"key"`
	Value      string    `db:"value" sync:"desired"`
	ChangedAt  time.Time `db:"changed_at" sync:"version"`
}

func (activeOnSetting) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "active_on_setting", Mirror: magicsync.Setting, Origin: "register_id", Active: "shop.live_settings"}
}

type activeTwoDots struct {
	ID int64 `db:"id"`
}

func (activeTwoDots) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "active_two_dots", Mirror: magicsync.Catalog, Active: "db.shop.live_products"}
}

type activeSchemaQuoted struct {
	ID int64 `db:"id"`
}

func (activeSchemaQuoted) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "active_schema_quoted", Mirror: magicsync.Catalog, Active: `sh"op.live_products`}
}

type activeViewLong struct {
	ID int64 `db:"id"`
}

func (activeViewLong) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "active_view_long", Mirror: magicsync.Catalog, Active: "shop." + strings.Repeat("v", 64)}
}

type activeViewEmpty struct {
	ID int64 `db:"id"`
}

func (activeViewEmpty) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "active_view_empty", Mirror: magicsync.Catalog, Active: "shop."}
}

type activeSchemaEmpty struct {
	ID int64 `db:"id"`
}

func (activeSchemaEmpty) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "active_schema_empty", Mirror: magicsync.Catalog, Active: ".live_products"}
}

type activeViewControl struct {
	ID int64 `db:"id"`
}

func (activeViewControl) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "active_view_control", Mirror: magicsync.Catalog, Active: "live\nproducts"}
}

type activeViewInvalidUTF8 struct {
	ID int64 `db:"id"`
}

func (activeViewInvalidUTF8) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "active_view_invalid_utf8", Mirror: magicsync.Catalog, Active: "shop.live\xffproducts"}
}

// activeBothBad is the declaration the review found accepted: a quote in
// the schema and a view of 80 bytes.
type activeBothBad struct {
	ID int64 `db:"id"`
}

func (activeBothBad) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "active_both_bad", Mirror: magicsync.Catalog, Active: "sh\"op." + strings.Repeat("v", 80)}
}

type assignedText struct {
	ID       int64  `db:"id"`
	Register string `db:"register"`
}

func (assignedText) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "assigned_text", Mirror: magicsync.Catalog, Sync: magicsync.Assigned("register")}
}

type assignedMissing struct {
	ID int64 `db:"id"`
}

func (assignedMissing) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "assigned_missing", Mirror: magicsync.Catalog, Sync: magicsync.Assigned("register_id")}
}

type groupedBadMembers struct {
	ID     int64     `db:"id"`
	ShopID uuid.UUID `db:"shop_id"`
}

func (groupedBadMembers) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "grouped_bad_members", Mirror: magicsync.Catalog,
		Sync: magicsync.Grouped("shop.registers(id)", "shop_id")}
}

type withMap struct {
	ID    int64             `db:"id"`
	Attrs map[string]string `db:"attrs"`
}

func (withMap) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "with_map", Mirror: magicsync.Catalog}
}

type withChan struct {
	ID    int64    `db:"id"`
	Ready chan int `db:"ready"`
}

func (withChan) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "with_chan", Mirror: magicsync.Catalog}
}

type address struct {
	Street string
	City   string
}

type withStruct struct {
	ID      int64   `db:"id"`
	Address address `db:"address"`
}

func (withStruct) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "with_struct", Mirror: magicsync.Catalog}
}

type withIntSlice struct {
	ID    int64 `db:"id"`
	Sizes []int `db:"sizes"`
}

func (withIntSlice) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "with_int_slice", Mirror: magicsync.Catalog}
}

type unknownFlag struct {
	ID   int64  `db:"id" sync:"kye"`
	Name string `db:"name"`
}

func (unknownFlag) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "unknown_flag", Mirror: magicsync.Catalog}
}

type noMirror struct {
	ID int64 `db:"id"`
}

func (noMirror) SyncTable() magicsync.Table { return magicsync.Table{Name: "no_mirror"} }

type originOnCatalog struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
}

func (originOnCatalog) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "origin_on_catalog", Mirror: magicsync.Catalog, Origin: "register_id"}
}

type syncOnRecord struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	ID         int64     `db:"id" sync:"key"`
}

func (syncOnRecord) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "routed_record", Mirror: magicsync.Record, Origin: "register_id",
		Sync: magicsync.Assigned("register_id")}
}

type replicaOwnedOnRecord struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	ID         int64     `db:"id" sync:"key"`
	Note       string    `db:"note" sync:"replica_owned"`
}

func (replicaOwnedOnRecord) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "replica_owned_on_record", Mirror: magicsync.Record, Origin: "register_id"}
}

type retiredNotBool struct {
	ID      int64  `db:"id"`
	Retired string `db:"retired"`
}

func (retiredNotBool) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "retired_not_bool", Mirror: magicsync.Catalog, Retired: "retired"}
}

type unmirroredMapped struct {
	ID   int64  `db:"id"`
	Name string `db:"name"`
}

func (unmirroredMapped) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "unmirrored_mapped", Mirror: magicsync.Catalog, Unmirrored: []string{"name"}}
}

type columnNameQuoted struct {
	ID   int64  `db:"id"`
	Note string `db:"no\"te"`
}

func (columnNameQuoted) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "column_name_quoted", Mirror: magicsync.Catalog}
}

type columnNameC1Control struct {
	ID   int64  `db:"id"`
	Note string "db:\"no\u0085te\""
}

func (columnNameC1Control) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "column_name_c1_control", Mirror: magicsync.Catalog}
}

type columnNameControl struct {
	ID   int64  `db:"id"`
	Note string `db:"no\tte"`
}

func (columnNameControl) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "column_name_control", Mirror: magicsync.Catalog}
}

type columnNameLong struct {
	ID   int64  `db:"id"`
	Note string `db:"cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"`
}

func (columnNameLong) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "column_name_long", Mirror: magicsync.Catalog}
}

// columnNameLongUntagged's untagged field names its column itself,
// lowercased: 64 bytes.
type columnNameLongUntagged struct {
	ID                                                               int64 `db:"id"`
	Abbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb string
}

func (columnNameLongUntagged) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "column_name_long_untagged", Mirror: magicsync.Catalog}
}

type schemaQuoted struct {
	ID int64 `db:"id"`
}

func (schemaQuoted) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: `sh"op`, Name: "schema_quoted", Mirror: magicsync.Catalog}
}

type schemaInvalidUTF8 struct {
	ID int64 `db:"id"`
}

func (schemaInvalidUTF8) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "sh\xffop", Name: "schema_invalid_utf8", Mirror: magicsync.Catalog}
}

// schemaLong's schema is 32 runes but 64 bytes: the limit is PostgreSQL's
// NAMEDATALEN, in bytes.
type schemaLong struct {
	ID int64 `db:"id"`
}

func (schemaLong) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: strings.Repeat("é", 32), Name: "schema_long", Mirror: magicsync.Catalog}
}

type retiredNoColumn struct {
	ID   int64  `db:"id"`
	Name string `db:"name"`
}

func (retiredNoColumn) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "retired_no_column", Mirror: magicsync.Catalog, Retired: "retired"}
}

// retiredSkipped has a Retired field, but db:"-" makes it no column.
type retiredSkipped struct {
	ID      int64 `db:"id"`
	Retired bool  `db:"-"`
}

func (retiredSkipped) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "retired_skipped", Mirror: magicsync.Catalog, Retired: "retired"}
}

type unmirroredEmpty struct {
	ID int64 `db:"id"`
}

func (unmirroredEmpty) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "unmirrored_empty", Mirror: magicsync.Catalog, Unmirrored: []string{"cost", ""}}
}

type unmirroredLong struct {
	ID int64 `db:"id"`
}

func (unmirroredLong) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "unmirrored_long", Mirror: magicsync.Catalog, Unmirrored: []string{strings.Repeat("u", 64)}}
}

type unmirroredQuoted struct {
	ID int64 `db:"id"`
}

func (unmirroredQuoted) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "unmirrored_quoted", Mirror: magicsync.Catalog, Unmirrored: []string{`co"st`}}
}

type followsNothing struct {
	ID        int64 `db:"id"`
	ProductID int64 `db:"product_id"`
}

func (followsNothing) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "follows_nothing", Mirror: magicsync.Catalog, Sync: magicsync.Follows("product_id")}
}

type notAStruct int64

func (notAStruct) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "not_a_struct", Mirror: magicsync.Catalog}
}

// okCatalog is a valid catalog, for cases that need a second table.
type okCatalog struct {
	ID   uuid.UUID `db:"id" sync:"key"`
	Name string    `db:"name"`
}

func (okCatalog) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "ok_catalog", Mirror: magicsync.Catalog}
}

// refusal is one case of TestNewCodecsRefuses: rows that NewCodecs must
// refuse with exactly one Problem, of struct strct and field field, whose
// message holds each of says (what is wrong, then what to do).
type refusal struct {
	name  string
	rows  []magicsync.Declarer
	strct string
	field string
	says  []string
}

func one(rows ...magicsync.Declarer) []magicsync.Declarer { return rows }

// refusals are the rules of DESIGN.md's "NewCodecs refuses, listing every
// problem…", in its order, then the other rules NewCodecs keeps.
var refusals = []refusal{
	{"no table name", one(noName{}), "magicsync_test.noName", "Name",
		[]string{"no table name", "set Name"}},
	{"name over 63 bytes", one(longName{}), "magicsync_test.longName", "Name",
		[]string{"64 bytes, over PostgreSQL's 63", "rename the table"}},
	{"name beginning sync_", one(syncPrefixed{}), "magicsync_test.syncPrefixed", "Name",
		[]string{`"sync_log" begins sync_`, "rename the table"}},
	{"name beginning Sync_ in another case", one(syncPrefixedUpper{}), "magicsync_test.syncPrefixedUpper", "Name",
		[]string{`"Sync_Log" begins sync_`, "rename the table"}},
	{"table declared twice, even in another schema", one(itemsInShop{}, itemsInStock{}), "magicsync_test.itemsInStock", "Name",
		[]string{`table "items" is declared twice`, "magicsync_test.itemsInShop", "declare it once"}},
	{"type passed twice", one(okCatalog{}, &okCatalog{}), "magicsync_test.okCatalog", "",
		[]string{"passed twice", "pass it once"}},
	{"column named twice", one(columnTwice{}), "magicsync_test.columnTwice", "Title",
		[]string{`column "name" is named twice (also by Label)`, "rename one with a db tag"}},
	{"column named twice by an embedded struct", one(columnTwiceEmbedded{}), "magicsync_test.columnTwiceEmbedded", "Changed",
		[]string{`column "updated_at" is named twice (also by stamp.UpdatedAt)`, "rename one with a db tag"}},
	{"key that is no field", one(keyNoField{}), "magicsync_test.keyNoField", "Key",
		[]string{`key column "code" is no column`, "name a column in Key"}},
	{"no key and no id column", one(noKeyAtAll{}), "magicsync_test.noKeyAtAll", "Key",
		[]string{"no key", `tag the key fields with sync:"key"`}},
	{"key column nullable (pointer)", one(keyNullable{}), "magicsync_test.keyNullable", "ID",
		[]string{`key column "id" cannot be nullable`, "plain (non-pointer"}},
	{"key column nullable (sql.NullString)", one(keyNullString{}), "magicsync_test.keyNullString", "Code",
		[]string{`key column "code" cannot be nullable`, "plain (non-pointer, non-Null)"}},
	{"key column generated", one(keyGenerated{}), "magicsync_test.keyGenerated", "ID",
		[]string{`key column "id" cannot be generated`, "drop the flag"}},
	{"key column replica_owned", one(keyReplicaOwned{}), "magicsync_test.keyReplicaOwned", "ID",
		[]string{`key column "id" cannot be replica_owned`, "drop the flag"}},
	{"key column version", one(keyVersion{}), "magicsync_test.keyVersion", "ID",
		[]string{`key column "id" cannot be version`, "drop the flag"}},
	{"key column created", one(keyCreated{}), "magicsync_test.keyCreated", "ID",
		[]string{`key column "id" cannot be created`, "drop the flag"}},
	{"key column desired", one(keyDesired{}), "magicsync_test.keyDesired", "Name",
		[]string{`key column "name" cannot be desired`, "drop the flag"}},
	{"key-tagged field left out of Key", one(keyTagLeftOut{}), "magicsync_test.keyTagLeftOut", "Line",
		[]string{`"line" is tagged sync:"key" but Key (id) leaves it out`, "list it in Key or drop the flag"}},
	{"key column listed twice in Key", one(keyListedTwice{}), "magicsync_test.keyListedTwice", "ID",
		[]string{`"id" is named twice in Key`, "list it once"}},
	{"two version columns", one(twoVersions{}), "magicsync_test.twoVersions", "Revision",
		[]string{"a second version column (the first is UpdatedAt)", "keep one"}},
	{"two created columns", one(twoCreated{}), "magicsync_test.twoCreated", "FirstSeen",
		[]string{"a second created column (the first is CreatedAt)", "keep one"}},
	{"nullable version", one(nullableVersion{}), "magicsync_test.nullableVersion", "UpdatedAt",
		[]string{"version column is nullable", "make it a plain (non-pointer) type"}},
	{"generated that is also version", one(generatedVersion{}), "magicsync_test.generatedVersion", "UpdatedAt",
		[]string{"generated column cannot also be version", "drop one of the flags"}},
	{"generated that is also created", one(generatedCreated{}), "magicsync_test.generatedCreated", "CreatedAt",
		[]string{"generated column cannot also be version, created", "drop one of the flags"}},
	{"generated that is also desired", one(generatedDesired{}), "magicsync_test.generatedDesired", "Value",
		[]string{"generated column cannot also be version, created or desired", "drop one of the flags"}},
	{"Origin not a key column", one(originNotKey{}), "magicsync_test.originNotKey", "RegisterID",
		[]string{`Origin "register_id" is not a key column`, `tag it sync:"key" or list it in Key`}},
	{"Origin no column at all", one(originNoColumn{}), "magicsync_test.originNoColumn", "Origin",
		[]string{`Origin "till" is no column`, "set Origin to the key column"}},
	{"Origin not a uuid", one(originNotUUID{}), "magicsync_test.originNotUUID", "Till",
		[]string{`Origin "till" holds a replica's id`, "make the field a uuid.UUID"}},
	{"record without Origin", one(recordNoOrigin{}), "magicsync_test.recordNoOrigin", "Origin",
		[]string{"a record needs Origin", "set it to the key column"}},
	{"setting without Origin", one(settingNoOrigin{}), "magicsync_test.settingNoOrigin", "Origin",
		[]string{"a setting needs Origin", "set it to the key column"}},
	{"setting without desired", one(settingNoDesired{}), "magicsync_test.settingNoDesired", "",
		[]string{"a setting without desired columns", `tag the columns the server may wish with sync:"desired"`}},
	{"setting without version", one(settingNoVersion{}), "magicsync_test.settingNoVersion", "",
		[]string{"a setting without its own version column", `tag one with sync:"version"`}},
	{"desired on a catalog", one(desiredOnCatalog{}), "magicsync_test.desiredOnCatalog", "Price",
		[]string{"desired on a catalog", "drop the flag or make the table a Setting"}},
	{"desired on a record", one(desiredOnRecord{}), "magicsync_test.desiredOnRecord", "Total",
		[]string{"desired on a record", "drop the flag or make the table a Setting"}},
	{"Apply on a catalog", one(applyOnCatalog{}), "magicsync_test.applyOnCatalog", "Apply",
		[]string{"Apply on a catalog", "drop Apply"}},
	{"Apply on a record", one(applyOnRecord{}), "magicsync_test.applyOnRecord", "Apply",
		[]string{"Apply on a record", "drop Apply"}},
	{"Active on a record", one(activeOnRecord{}), "magicsync_test.activeOnRecord", "Active",
		[]string{"Active on a record", "drop Active"}},
	{"Active on a setting", one(activeOnSetting{}), "magicsync_test.activeOnSetting", "Active",
		[]string{"Active on a setting", "drop Active"}},
	{"Active with more than one dot", one(activeTwoDots{}), "magicsync_test.activeTwoDots", "Active",
		[]string{`Active "db.shop.live_products" has more than one dot`, "write schema.view or view"}},
	{"Active schema with a quote", one(activeSchemaQuoted{}), "magicsync_test.activeSchemaQuoted", "Active",
		[]string{`Active "sh\"op.live_products": its schema: the name "sh\"op" holds a control character, a quote`, "write schema.view or view"}},
	{"Active view over 63 bytes", one(activeViewLong{}), "magicsync_test.activeViewLong", "Active",
		[]string{"its view: the name", "64 bytes, over PostgreSQL's 63", "write schema.view or view"}},
	{"Active view empty", one(activeViewEmpty{}), "magicsync_test.activeViewEmpty", "Active",
		[]string{`Active "shop.": its view: an empty name`, "write schema.view or view"}},
	{"Active schema empty", one(activeSchemaEmpty{}), "magicsync_test.activeSchemaEmpty", "Active",
		[]string{`Active ".live_products": its schema: an empty name`, "write schema.view or view"}},
	{"Active view with a control character", one(activeViewControl{}), "magicsync_test.activeViewControl", "Active",
		[]string{"its view: the name", "holds a control character", "write schema.view or view"}},
	{"Active view of invalid UTF-8", one(activeViewInvalidUTF8{}), "magicsync_test.activeViewInvalidUTF8", "Active",
		[]string{"its view: the name", "invalid UTF-8", "write schema.view or view"}},
	{"Assigned of a non-uuid column", one(assignedText{}), "magicsync_test.assignedText", "Register",
		[]string{`Assigned("register") needs a uuid.UUID column`, "make the field a uuid.UUID"}},
	{"Assigned of no column", one(assignedMissing{}), "magicsync_test.assignedMissing", "Sync",
		[]string{`assigned names column "register_id", which is no column`, "name a column of the struct"}},
	{"Grouped members malformed", one(groupedBadMembers{}), "magicsync_test.groupedBadMembers", "Sync",
		[]string{"Grouped members", "needs two", "schema.table(replica_column, group_column)"}},
	{"unsupported type: map", one(withMap{}), "magicsync_test.withMap", "Attrs",
		[]string{"map[string]string is not supported", `skip it with db:"-"`}},
	{"unsupported type: chan", one(withChan{}), "magicsync_test.withChan", "Ready",
		[]string{"chan int is not supported", `skip it with db:"-"`}},
	{"unsupported type: struct", one(withStruct{}), "magicsync_test.withStruct", "Address",
		[]string{"magicsync_test.address is not supported", "driver.Valuer", `skip it with db:"-"`}},
	{"unsupported type: []int", one(withIntSlice{}), "magicsync_test.withIntSlice", "Sizes",
		[]string{"[]int is not supported", `skip it with db:"-"`}},
	{"unknown sync flag", one(unknownFlag{}), "magicsync_test.unknownFlag", "ID",
		[]string{`unknown sync flag "kye"`, "use key, version"}},
	{"Mirror not set", one(noMirror{}), "magicsync_test.noMirror", "Mirror",
		[]string{"Mirror is not set", "set it to magicsync.Catalog"}},
	{"Origin on a catalog", one(originOnCatalog{}), "magicsync_test.originOnCatalog", "Origin",
		[]string{`Origin "register_id" on a catalog`, "drop Origin or make the table a Record"}},
	{"Sync on a record", one(syncOnRecord{}), "magicsync_test.syncOnRecord", "Sync",
		[]string{"Sync on a record", "drop Sync"}},
	{"replica_owned on a record", one(replicaOwnedOnRecord{}), "magicsync_test.replicaOwnedOnRecord", "Note",
		[]string{"replica_owned on a record", "drop the flag"}},
	{"Retired not a bool", one(retiredNotBool{}), "magicsync_test.retiredNotBool", "Retired",
		[]string{`Retired column "retired" must be a bool`, "make the field a bool"}},
	{"Unmirrored names a mapped column", one(unmirroredMapped{}), "magicsync_test.unmirroredMapped", "Unmirrored",
		[]string{`Unmirrored names "name", which the struct maps`, "drop it from Unmirrored"}},
	{"column name with a quote", one(columnNameQuoted{}), "magicsync_test.columnNameQuoted", "Note",
		[]string{`column name: the name "no\"te" holds a control character, a quote`, "name the column with a db tag"}},
	{"column name with a control character", one(columnNameControl{}), "magicsync_test.columnNameControl", "Note",
		[]string{`column name: the name "no\tte" holds a control character`, "name the column with a db tag"}},
	{"column name with a C1 control character", one(columnNameC1Control{}), "magicsync_test.columnNameC1Control", "Note",
		[]string{"column name: the name", "holds a control character", "name the column with a db tag"}},
	{"column name over 63 bytes", one(columnNameLong{}), "magicsync_test.columnNameLong", "Note",
		[]string{"column name: the name", "64 bytes, over PostgreSQL's 63", "name the column with a db tag"}},
	{"untagged field naming a column over 63 bytes", one(columnNameLongUntagged{}), "magicsync_test.columnNameLongUntagged", "Abbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
		[]string{`column name: the name "abbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb" is 64 bytes, over PostgreSQL's 63`, "name the column with a db tag"}},
	{"schema with a quote", one(schemaQuoted{}), "magicsync_test.schemaQuoted", "Schema",
		[]string{`schema: the name "sh\"op" holds a control character, a quote`, "rename the schema"}},
	{"schema of invalid UTF-8", one(schemaInvalidUTF8{}), "magicsync_test.schemaInvalidUTF8", "Schema",
		[]string{"schema: the name", "invalid UTF-8", "rename the schema"}},
	{"schema over 63 bytes (in 32 runes)", one(schemaLong{}), "magicsync_test.schemaLong", "Schema",
		[]string{"schema: the name", "64 bytes, over PostgreSQL's 63", "rename the schema"}},
	{"Retired naming no column", one(retiredNoColumn{}), "magicsync_test.retiredNoColumn", "Retired",
		[]string{`Retired names "retired", which is no column`, "name a bool column of the struct"}},
	{"Retired naming a field skipped with db:\"-\"", one(retiredSkipped{}), "magicsync_test.retiredSkipped", "Retired",
		[]string{`Retired names "retired", which is no column`, "name a bool column of the struct"}},
	{"Unmirrored entry empty", one(unmirroredEmpty{}), "magicsync_test.unmirroredEmpty", "Unmirrored",
		[]string{"Unmirrored: an empty name", "fix or drop the name"}},
	{"Unmirrored entry over 63 bytes", one(unmirroredLong{}), "magicsync_test.unmirroredLong", "Unmirrored",
		[]string{"Unmirrored: the name", "64 bytes, over PostgreSQL's 63", "fix or drop the name"}},
	{"Unmirrored entry with a quote", one(unmirroredQuoted{}), "magicsync_test.unmirroredQuoted", "Unmirrored",
		[]string{`Unmirrored: the name "co\"st" holds a control character, a quote`, "fix or drop the name"}},
	{"Follows with no catalog to follow", one(followsNothing{}), "magicsync_test.followsNothing", "Sync",
		[]string{"Follows needs another catalog", "declare the catalog"}},
	{"row type not a struct", one(notAStruct(0)), "magicsync_test.notAStruct", "",
		[]string{"must be a struct", "declare SyncTable on a struct type"}},
	{"nil row", one(nil), "<nil>", "",
		[]string{"a nil row", "pass a value of the row type"}},
}

// declarationError calls NewCodecs, which must refuse, and returns its
// *DeclarationError.
func declarationError(t *testing.T, rows ...magicsync.Declarer) *magicsync.DeclarationError {
	t.Helper()
	c, err := magicsync.NewCodecs(rows...)
	if err == nil {
		t.Fatalf("NewCodecs accepted the rows, want a refusal")
	}
	if c != nil {
		t.Errorf("NewCodecs returned Codecs along with its error")
	}
	var de *magicsync.DeclarationError
	if !errors.As(err, &de) {
		t.Fatalf("NewCodecs error %v (%T) is no *DeclarationError", err, err)
	}
	if len(de.Problems) == 0 {
		t.Fatalf("DeclarationError lists no problems")
	}
	return de
}

func TestNewCodecsRefusesEachRuleWithOneProblemNamingStructFieldAndRemedy(t *testing.T) {
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			de := declarationError(t, tc.rows...)
			if len(de.Problems) != 1 {
				t.Fatalf("got %d problems, want exactly 1:\n%v", len(de.Problems), de)
			}
			p := de.Problems[0]
			if p.Struct != tc.strct {
				t.Errorf("Problem.Struct = %q, want %q", p.Struct, tc.strct)
			}
			if p.Field != tc.field {
				t.Errorf("Problem.Field = %q, want %q", p.Field, tc.field)
			}
			for _, s := range tc.says {
				if !strings.Contains(p.Msg, s) {
					t.Errorf("Problem.Msg = %q\n  does not say %q", p.Msg, s)
				}
			}
			// The error's text carries every problem, struct and field.
			text := de.Error()
			if !strings.Contains(text, p.String()) {
				t.Errorf("Error() = %q\n  lacks the problem %q", text, p.String())
			}
			want := tc.strct
			if tc.field != "" {
				want += "." + tc.field
			}
			if !strings.HasPrefix(p.String(), want+": ") {
				t.Errorf("Problem.String() = %q, want it to begin %q", p.String(), want+": ")
			}
		})
	}
}

// manyProblems breaks several rules at once.
type manyProblems struct {
	ID        *int64            `db:"id" sync:"key"`                 // a nullable key
	Attrs     map[string]string `db:"attrs"`                         // an unsupported type
	Label     string            `db:"label" sync:"desired"`          // desired off a setting
	Title     string            `db:"label"`                         // a column named twice
	UpdatedAt *time.Time        `db:"updated_at" sync:"version"`     // a nullable version
	Revision  int64             `db:"revision" sync:"version,bogus"` // a second version, an unknown flag
}

func (manyProblems) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "sync_many", Mirror: magicsync.Catalog, Active: "a.b.c", Apply: magicsync.IfUnchanged}
}

func TestNewCodecsListsEveryProblemOfEveryStructInOneError(t *testing.T) {
	de := declarationError(t, manyProblems{}, okCatalog{}, keyVersion{}, recordNoOrigin{})
	want := []struct{ strct, field, says string }{
		{"magicsync_test.manyProblems", "Name", "begins sync_"},
		{"magicsync_test.manyProblems", "Active", "more than one dot"},
		{"magicsync_test.manyProblems", "Apply", "Apply on a catalog"},
		{"magicsync_test.manyProblems", "ID", "cannot be nullable"},
		{"magicsync_test.manyProblems", "Attrs", "is not supported"},
		{"magicsync_test.manyProblems", "Label", "desired on a catalog"},
		{"magicsync_test.manyProblems", "Title", "named twice"},
		{"magicsync_test.manyProblems", "UpdatedAt", "version column is nullable"},
		{"magicsync_test.manyProblems", "Revision", "a second version column"},
		{"magicsync_test.manyProblems", "Revision", `unknown sync flag "bogus"`},
		{"magicsync_test.keyVersion", "ID", "cannot be version"},
		{"magicsync_test.recordNoOrigin", "Origin", "a record needs Origin"},
	}
	for _, w := range want {
		found := slices.ContainsFunc(de.Problems, func(p magicsync.Problem) bool {
			return p.Struct == w.strct && p.Field == w.field && strings.Contains(p.Msg, w.says)
		})
		if !found {
			t.Errorf("no problem of %s field %q saying %q in:\n%v", w.strct, w.field, w.says, de)
		}
	}
	if len(de.Problems) != len(want) {
		t.Errorf("got %d problems, want %d:\n%v", len(de.Problems), len(want), de)
	}
	for _, p := range de.Problems {
		if p.Struct == "magicsync_test.okCatalog" {
			t.Errorf("a problem with the valid okCatalog: %v", p)
		}
	}
	if n := strings.Count(de.Error(), "\n  - "); n != len(de.Problems) {
		t.Errorf("Error() has %d lines of problems, want %d:\n%v", n, len(de.Problems), de)
	}
}

// TestNewCodecsRefusesBothPartsOfABadActive checks the declaration the
// review found accepted: each bad part of Active is its own problem, both
// naming the Active field.
func TestNewCodecsRefusesBothPartsOfABadActive(t *testing.T) {
	de := declarationError(t, activeBothBad{})
	if len(de.Problems) != 2 {
		t.Fatalf("got %d problems, want 2:\n%v", len(de.Problems), de)
	}
	for i, says := range []string{`its schema: the name "sh\"op" holds`, "its view: the name", "80 bytes, over PostgreSQL's 63"} {
		p := de.Problems[min(i, 1)]
		if p.Struct != "magicsync_test.activeBothBad" || p.Field != "Active" || !strings.Contains(p.Msg, says) {
			t.Errorf("problem %v, want one of field Active saying %q", p, says)
		}
	}
}

type activeOf63 struct {
	ID int64 `db:"id"`
}

func (activeOf63) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "active_of_63", Mirror: magicsync.Catalog, Active: strings.Repeat("s", 63) + "." + strings.Repeat("v", 63)}
}

type activeOnePart struct {
	ID int64 `db:"id"`
}

func (activeOnePart) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "active_one_part", Mirror: magicsync.Catalog, Active: "live products"}
}

func TestNewCodecsAcceptsActiveOfTwo63BytePartsOrOnePart(t *testing.T) {
	c := mustCodecs(t, activeOf63{}, activeOnePart{})
	if got := c.Tables()[1].Active; got != "live products" {
		t.Errorf("Active = %q", got)
	}
}

func TestNewCodecsAcceptsNameOf63Bytes(t *testing.T) {
	c := mustCodecs(t, name63{})
	if got := c.Tables()[0].Name; len(got) != 63 {
		t.Errorf("Name = %q (%d bytes), want 63 bytes", got, len(got))
	}
}

type name63 struct {
	ID int64 `db:"id"`
}

func (name63) SyncTable() magicsync.Table {
	return magicsync.Table{Name: strings.Repeat("n", 63), Mirror: magicsync.Catalog}
}

func mustCodecs(t testing.TB, rows ...magicsync.Declarer) *magicsync.Codecs {
	t.Helper()
	c, err := magicsync.NewCodecs(rows...)
	if err != nil {
		t.Fatalf("NewCodecs: %v", err)
	}
	return c
}

func mustTable[T magicsync.Declarer](t testing.TB, c *magicsync.Codecs) *codec.TableCodec {
	t.Helper()
	tc, err := codec.TableOf[T](c)
	if err != nil {
		t.Fatalf("TableOf: %v", err)
	}
	return tc
}

// Accepted shapes.

type keyFromTable struct {
	Line    int64     `db:"line"`
	Receipt uuid.UUID `db:"receipt"`
	ID      int64     `db:"id"`
}

func (keyFromTable) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "key_from_table", Mirror: magicsync.Catalog, Key: []string{"receipt", "line"}}
}

type keyFromTags struct {
	Line    int64     `db:"line" sync:"key"`
	Text    string    `db:"text"`
	Receipt uuid.UUID `db:"receipt" sync:"key"`
}

func (keyFromTags) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "key_from_tags", Mirror: magicsync.Catalog}
}

type keyFromTableAgreeingWithTags struct {
	Line    int64     `db:"line" sync:"key"`
	Receipt uuid.UUID `db:"receipt" sync:"key"`
}

func (keyFromTableAgreeingWithTags) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "key_agreeing", Mirror: magicsync.Catalog, Key: []string{"receipt", "line"}}
}

type keyDefaultID struct {
	Name string `db:"name"`
	ID   int64  `db:"id"`
}

func (keyDefaultID) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "key_default_id", Mirror: magicsync.Catalog}
}

func TestNewCodecsKeyComesFromTableKeyElseKeyTagsInFieldOrderElseID(t *testing.T) {
	c := mustCodecs(t, keyFromTable{}, keyFromTags{}, keyDefaultID{}, keyFromTableAgreeingWithTags{})
	for _, tt := range []struct {
		table    string
		key      []string
		keyIndex []int
	}{
		{"key_from_table", []string{"receipt", "line"}, []int{1, 0}},
		{"key_from_tags", []string{"line", "receipt"}, []int{0, 2}},
		{"key_default_id", []string{"id"}, []int{1}},
		{"key_agreeing", []string{"receipt", "line"}, []int{1, 0}},
	} {
		tc, err := c.Table(tt.table)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(tc.Key, tt.key) || !slices.Equal(tc.KeyIndex, tt.keyIndex) {
			t.Errorf("%s: Key, KeyIndex = %q, %v; want %q, %v", tt.table, tc.Key, tc.KeyIndex, tt.key, tt.keyIndex)
		}
		for i, col := range tc.Columns {
			if col.Key != slices.Contains(tt.keyIndex, i) {
				t.Errorf("%s: column %q has Key %v, but KeyIndex is %v", tt.table, col.Name, col.Key, tc.KeyIndex)
			}
		}
	}
}

func TestNewCodecsNormalisesSchemaRouteAndRoles(t *testing.T) {
	c := mustCodecs(t, keyDefaultID{}, product{}, registerSetting{}, receipt{})
	kd := mustTable[keyDefaultID](t, c)
	if kd.Schema != "public" {
		t.Errorf("Schema = %q, want public for an empty Schema", kd.Schema)
	}
	if kd.Sync.Kind() != codec.RouteBroadcast {
		t.Errorf("a catalog without Sync routes %v, want broadcast", kd.Sync)
	}
	if got := kd.QualifiedName(); got != `"public"."key_default_id"` {
		t.Errorf("QualifiedName = %s", got)
	}
	if kd.OriginIndex != -1 || kd.VersionIndex != -1 || kd.CreatedIndex != -1 || kd.DesiredIndex != nil {
		t.Errorf("indexes of absent roles = %d, %d, %d, %v; want -1, -1, -1, nil",
			kd.OriginIndex, kd.VersionIndex, kd.CreatedIndex, kd.DesiredIndex)
	}

	rs := mustTable[registerSetting](t, c)
	if rs.OriginIndex != 0 || rs.VersionIndex != 4 || !slices.Equal(rs.DesiredIndex, []int{3}) {
		t.Errorf("setting: OriginIndex, VersionIndex, DesiredIndex = %d, %d, %v; want 0, 4, [3]",
			rs.OriginIndex, rs.VersionIndex, rs.DesiredIndex)
	}
	if rs.Apply != codec.IfUnchanged || rs.Sync.Kind() != codec.RouteDefault {
		t.Errorf("setting: Apply %v, Sync %v; want if_unchanged, default", rs.Apply, rs.Sync)
	}
	rc := mustTable[receipt](t, c)
	if rc.Mirror != codec.Record || rc.OriginIndex != 0 || rc.CreatedIndex != 4 || !rc.Columns[4].Created {
		t.Errorf("record: Mirror %v, OriginIndex %d, CreatedIndex %d", rc.Mirror, rc.OriginIndex, rc.CreatedIndex)
	}
	if !rc.Columns[3].Generated || !rc.Columns[3].Nullable {
		t.Errorf("record: total_cents should be generated and nullable: %+v", rc.Columns[3])
	}

	// Looking tables up.
	if tc, err := c.Table("products"); err != nil || tc.Type != reflect.TypeFor[product]() {
		t.Errorf(`Table("products") = %v, %v`, tc, err)
	}
	if tc, err := c.Of(&product{}); err != nil || tc.Name != "products" {
		t.Errorf("Of(&product{}) = %v, %v", tc, err)
	}
	if _, err := c.Table("nope"); !errors.Is(err, magicsync.ErrNotDeclared) {
		t.Errorf(`Table("nope") error = %v, want ErrNotDeclared`, err)
	}
	if _, err := c.Of(okCatalog{}); !errors.Is(err, magicsync.ErrNotDeclared) {
		t.Errorf("Of(undeclared) error = %v, want ErrNotDeclared", err)
	}
	var names []string
	for _, tc := range c.Tables() {
		names = append(names, tc.Name)
	}
	if want := []string{"key_default_id", "products", "settings", "receipts"}; !slices.Equal(names, want) {
		t.Errorf("Tables() = %q, want the order given, %q", names, want)
	}
}

func TestNewCodecsAcceptsANilPointerNamingTheType(t *testing.T) {
	c := mustCodecs(t, (*product)(nil), (*registerSetting)(nil))
	if _, err := codec.TableOf[product](c); err != nil {
		t.Error(err)
	}
	if _, err := codec.TableOf[*registerSetting](c); err != nil {
		t.Error(err)
	}
}

func TestRoutesSayWhatTheyAre(t *testing.T) {
	for _, tt := range []struct {
		r      magicsync.Route
		kind   magicsync.RouteKind
		column string
		str    string
	}{
		{magicsync.Route{}, magicsync.RouteDefault, "", "default"},
		{magicsync.Broadcast(), magicsync.RouteBroadcast, "", "broadcast"},
		{magicsync.Assigned("register_id"), magicsync.RouteAssigned, "register_id", `assigned("register_id")`},
		{magicsync.Follows("product_id"), magicsync.RouteFollows, "product_id", `follows("product_id")`},
	} {
		if tt.r.Kind() != tt.kind || tt.r.Column() != tt.column || tt.r.String() != tt.str {
			t.Errorf("route %v: kind %v column %q, want %v %q %s", tt.r, tt.r.Kind(), tt.r.Column(), tt.kind, tt.column, tt.str)
		}
	}
	for _, tt := range []struct{ got, want string }{
		{magicsync.Catalog.String(), "catalog"}, {magicsync.Record.String(), "record"},
		{magicsync.Setting.String(), "setting"}, {magicsync.Mirror(0).String(), "mirror(0)"},
		{magicsync.Always.String(), "always"}, {magicsync.IfUnchanged.String(), "if_unchanged"},
		{magicsync.RouteKind(9).String(), "route(9)"}, {magicsync.Strategy(7).String(), "strategy(7)"},
	} {
		if tt.got != tt.want {
			t.Errorf("String() = %q, want %q", tt.got, tt.want)
		}
	}
}

func TestRoutesAcceptedOnCatalogs(t *testing.T) {
	c := mustCodecs(t, product{}, productImage{}, assignedOK{})
	if k := mustTable[productImage](t, c).Sync.Kind(); k != codec.RouteFollows {
		t.Errorf("productImage routes %v, want follows", k)
	}
	if k := mustTable[assignedOK](t, c).Sync.Kind(); k != codec.RouteAssigned {
		t.Errorf("assignedOK routes %v, want assigned", k)
	}
}

type productImage struct {
	ID        uuid.UUID `db:"id" sync:"key"`
	ProductID uuid.UUID `db:"product_id"`
	Data      []byte    `db:"data"`
}

func (productImage) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "product_images", Mirror: magicsync.Catalog,
		Sync: magicsync.Follows("product_id")}
}

type assignedOK struct {
	ID         int64         `db:"id"`
	RegisterID uuid.UUID     `db:"register_id"`
	Retired    bool          `db:"retired"`
	Note       string        `db:"note" sync:"replica_owned"`
	Total      sql.NullInt64 `db:"total" sync:"generated"`
}

func (assignedOK) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "assigned_ok", Mirror: magicsync.Catalog, Sync: magicsync.Assigned("register_id"),
		Active: "shop.live_assigned", Retired: "retired", Unmirrored: []string{"server_only"}}
}

// The DESIGN.md declarations, shared with the examples and value tests.
// The product is internal/shoptest's, which is the same.

type product = shoptest.Product

type registerSetting struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	ID         uuid.UUID `db:"id" sync:"key"`
	Name       string    `db:"name"`
	Value      string    `db:"value" sync:"desired"`
	ChangedAt  time.Time `db:"changed_at" sync:"version"`
}

func (registerSetting) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "settings", Mirror: magicsync.Setting,
		Origin: "register_id", Apply: magicsync.IfUnchanged}
}

type receipt struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	ID         int64     `db:"id" sync:"key"`
	Lines      int32     `db:"lines"`
	TotalCents *int64    `db:"total_cents" sync:"generated"`
	CreatedAt  time.Time `db:"created_at" sync:"created"`
}

func (receipt) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "receipts", Mirror: magicsync.Record, Origin: "register_id"}
}

// KeyOf names a row as the engines do: its key columns' values, in key
// order, the same whatever else the row holds; a row type not declared is
// refused.
func TestKeyOfNamesARowByItsKeyColumns(t *testing.T) {
	c, err := magicsync.NewCodecs(registerSetting{})
	if err != nil {
		t.Fatal(err)
	}
	reg, id := uuid.New(), uuid.New()
	a, err := magicsync.KeyOf(c, registerSetting{RegisterID: reg, ID: id, Name: "footer", Value: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := magicsync.KeyOf(c, registerSetting{RegisterID: reg, ID: id, Name: "other", Value: "b", ChangedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if a != b || a == "" {
		t.Errorf("keys of the same row differ: %v, %v", a, b)
	}
	if want := fmt.Sprintf("(%s, %s)", reg, id); a.String() != want {
		t.Errorf("key %v, want %s", a, want)
	}
	if _, err := magicsync.KeyOf(c, receipt{}); !errors.Is(err, magicsync.ErrNotDeclared) {
		t.Errorf("KeyOf of a row type not declared: %v, want ErrNotDeclared", err)
	}
}
