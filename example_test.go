// This file holds NewCodecs' refusal example and the Product declaration
// the examples share.

package magicsync_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
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

// Reading is a record declared wrongly in three ways.
type Reading struct {
	SensorID uuid.UUID  `db:"sensor_id"`
	At       *time.Time `db:"at" sync:"key"`
	Celsius  float64    `db:"celsius" sync:"desired"`
}

func (Reading) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "readings", Mirror: magicsync.Record}
}

func ExampleNewCodecs_refusal() {
	_, err := magicsync.NewCodecs(Reading{})
	var de *magicsync.DeclarationError
	if errors.As(err, &de) {
		fmt.Println(de)
	}
	// Output:
	// magicsync: 3 problem(s) with the row declarations:
	//   - magicsync_test.Reading.Origin: a record needs Origin: set it to the key column holding the writing replica's id
	//   - magicsync_test.Reading.Celsius: desired on a record; only a setting's columns may be desired: drop the flag or make the table a Setting
	//   - magicsync_test.Reading.At: key column "at" cannot be nullable; a key is set once and never NULL: drop the flag, or make the field a plain (non-pointer, non-Null) type
}
