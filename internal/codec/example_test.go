// This file holds the package's example: what NewCodecs compiles.

package codec_test

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
)

// Product is a catalog: the server writes it, and each register holds the
// products of its shop.
type Product struct {
	ID         uuid.UUID `db:"id" sync:"key"`
	ShopID     uuid.UUID `db:"shop_id"`
	Name       string    `db:"name"`
	PriceCents int64     `db:"price_cents"`
	UpdatedAt  time.Time `db:"updated_at" sync:"version"`
}

func (Product) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "products", Mirror: magicsync.Catalog,
		Sync: magicsync.Grouped("shop.registers(id, shop_id)", "shop_id")}
}

// RegisterSetting is a setting: a register owns its rows, and the server
// may wish their values other.
type RegisterSetting struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	ID         uuid.UUID `db:"id" sync:"key"`
	Name       string    `db:"name"`
	Value      string    `db:"value" sync:"desired"`
	ChangedAt  time.Time `db:"changed_at" sync:"version"`
}

func (RegisterSetting) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "settings", Mirror: magicsync.Setting,
		Origin: "register_id", Apply: magicsync.IfUnchanged}
}

// Example shows what NewCodecs compiles of two declarations: the tables,
// their keys, columns, routes and roles, and a row's key.
func Example() {
	codecs, err := magicsync.NewCodecs(Product{}, RegisterSetting{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, tc := range codecs.Tables() {
		fmt.Printf("%s %s: key %v, columns %v\n", tc.Mirror, tc.QualifiedName(), tc.Key, tc.ColumnNames(nil))
		switch tc.Mirror {
		case codec.Catalog:
			fmt.Printf("  routed %v\n", tc.Sync)
		case codec.Setting:
			fmt.Printf("  origin %s, version %s, desired %v, wishes applied %v\n", tc.Columns[tc.OriginIndex].Name,
				tc.Columns[tc.VersionIndex].Name, tc.ColumnNames(tc.DesiredIndex), tc.Apply)
		}
	}

	setting := RegisterSetting{
		RegisterID: uuid.MustParse("00000000-0000-0000-0000-00000000000a"),
		ID:         uuid.MustParse("00000000-0000-0000-0000-000000000001"),
		Name:       "volume", Value: "7",
	}
	tc, _ := codec.TableOf[RegisterSetting](codecs)
	key, _ := tc.KeyOf(setting)
	fmt.Println("key of a setting:", key)
	// Output:
	// catalog "shop"."products": key [id], columns [id shop_id name price_cents updated_at]
	//   routed grouped("shop.registers(id, shop_id)", "shop_id")
	// setting "shop"."settings": key [register_id id], columns [register_id id name value changed_at]
	//   origin register_id, version changed_at, desired [value], wishes applied if_unchanged
	// key of a setting: (00000000-0000-0000-0000-00000000000a, 00000000-0000-0000-0000-000000000001)
}
