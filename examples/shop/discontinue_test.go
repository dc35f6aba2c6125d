package main

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/examples/shop/shopcheck"
	"github.com/magicsync/magicsync/transport/httpsync"
)

// startRegister hands register i its token and starts it, as
// startRegisters does for all three; the shop stops it with the others.
func (s *testShop) startRegister(i int) *register {
	s.t.Helper()
	token, _, err := s.ho.token(s.ctx, s.data, i)
	if err != nil {
		s.t.Fatal(err)
	}
	r, err := startRegister(s.ctx, nil, s.data, i, s.ho.url, token, s.ho.codecs, testPoll, s.log)
	if err != nil {
		s.t.Fatal(err)
	}
	s.regs = append(s.regs, r)
	return r
}

// heldProduct is what a register holds of one product: whether it holds
// it, marked discontinued or not, and its barcodes.
type heldProduct struct {
	held, discontinued bool
	codes              []string
}

func (h heldProduct) String() string {
	if !h.held {
		return fmt.Sprintf("not held, barcodes %v", h.codes)
	}
	return fmt.Sprintf("held, discontinued %v, barcodes %v", h.discontinued, h.codes)
}

// holding reads what register r holds of product.
func (s *testShop) holding(r *register, product uuid.UUID) (heldProduct, error) {
	var h heldProduct
	err := r.db.QueryRowContext(s.ctx, "SELECT discontinued FROM products WHERE id = ?", product.String()).Scan(&h.discontinued)
	switch {
	case err == nil:
		h.held = true
	case err != sql.ErrNoRows:
		return h, err
	}
	h.codes, err = shopcheck.SQLiteRows(s.ctx, r.db, "SELECT code FROM barcodes WHERE product_id = ?", product.String())
	return h, err
}

// waitHolding waits until every register of regs holds of product what
// want says.
func (s *testShop) waitHolding(what string, product uuid.UUID, want heldProduct, regs ...*register) {
	s.t.Helper()
	waitFor(s.t, what, func() error {
		for _, r := range regs {
			got, err := s.holding(r, product)
			if err != nil {
				return err
			}
			if got.String() != want.String() {
				return fmt.Errorf("%s: %s; want %s", r.name, got, want)
			}
		}
		return nil
	})
}

// noRejections checks that the head office's Status lists no rejected row
// for any register.
func (s *testShop) noRejections() {
	s.t.Helper()
	all, err := s.ho.engine.Status(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, st := range all {
		if st.RejectedTotal != 0 || len(st.Rejected) != 0 {
			s.t.Errorf("%s: the head office lists %d rejected rows: %+v", s.ho.name(st.ID), st.RejectedTotal, st.Rejected)
		}
	}
}

// TestADiscontinuedProductStaysOnlyWhereItWasSold discontinues a product
// register 1 sold and register 2 did not: register 2 lets it go, and its
// barcodes; register 1 keeps it, marked discontinued and no longer sold,
// for its receipt line, but not its barcodes; register 3, started after,
// is never sent it; and the head office lists no rejected row. Back in the
// range, every register holds it again.
func TestADiscontinuedProductStaysOnlyWhereItWasSold(t *testing.T) {
	t.Parallel()
	s := startShop(t, false)
	r1, r2 := s.startRegister(0), s.startRegister(1)
	if err := s.ho.addProduct(s.ctx, "pumpkin soup", 450); err != nil {
		t.Fatal(err)
	}
	soup := uuid.NewSHA1(shopID, []byte("pumpkin soup"))
	codes := barcodes(soup)
	slices.Sort(codes)
	s.waitHolding("registers 1 and 2 hold the soup and its barcodes", soup, heldProduct{held: true, codes: codes}, r1, r2)

	// Register 1 scans the soup's barcode and sells it.
	id, price, found, err := r1.lookup(s.ctx, codes[0])
	if err != nil || !found || id != soup.String() || price != 450 {
		t.Fatalf("register 1 looks up barcode %s: product %s at %d, found %v, %v; want the soup at 450", codes[0], id, price, found, err)
	}
	sold := sale{receipt: uuid.New(), at: time.Now().UTC(), total: price,
		lines: []saleLine{{id: uuid.New(), product: id, quantity: 1, price: price}}}
	if err := r1.save(s.ctx, sold); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "register 1's sale filed", func() error {
		if n := s.receiptsFiled(r1); n != 1 {
			return fmt.Errorf("%d receipts of register 1 filed", n)
		}
		return nil
	})

	if err := s.ho.discontinue(s.ctx, "pumpkin soup"); err != nil {
		t.Fatal(err)
	}
	if err := s.ho.discontinue(s.ctx, "pumpkin soup"); err == nil {
		t.Error("discontinuing the soup twice: no error")
	}
	s.waitHolding("register 2 lets the soup go", soup, heldProduct{}, r2)
	s.waitHolding("register 1 keeps the soup, discontinued, without its barcodes", soup, heldProduct{held: true, discontinued: true}, r1)
	st, err := r1.engine.Status(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Retained["products"] != 1 {
		t.Errorf("register 1 says it keeps %v retired; want 1 product", st.Retained)
	}
	if _, _, found, err := r1.lookup(s.ctx, codes[0]); err != nil || found {
		t.Errorf("register 1 still finds the soup by its barcode (%v)", err)
	}
	rnd := seeded(t)
	for range 20 {
		rung, err := r1.ringUp(s.ctx, rnd)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range rung.lines {
			if l.product == soup.String() {
				t.Fatal("register 1 rings up the discontinued soup")
			}
		}
	}

	// Register 3 starts now, on a file that notes every product it is
	// ever given: it is provisioned without the soup.
	file := registerFile(s.data, 2)
	if err := createPrivate(file); err != nil {
		t.Fatal(err)
	}
	db, err := openFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(s.ctx, registerSchema+`
		CREATE TABLE products_given (id TEXT NOT NULL);
		CREATE TRIGGER products_given AFTER INSERT ON products BEGIN INSERT INTO products_given VALUES (new.id); END;`); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	r3 := s.startRegister(2)
	waitFor(t, "the shop settled with register 3", s.converged)
	s.waitHolding("register 3 lacks the soup", soup, heldProduct{}, r3)
	if given := localCount(t, r3, "products_given WHERE id = '"+soup.String()+"'"); given != 0 {
		t.Errorf("register 3 was given the discontinued soup %d times", given)
	}
	if given := localCount(t, r3, "products_given"); given != len(productNames) {
		t.Errorf("register 3 was given %d products; want the %d of the range", given, len(productNames))
	}
	s.noRejections()

	// Back in the range: every register holds it, with its barcodes, and
	// register 1 no longer marks it discontinued.
	if err := s.ho.addProduct(s.ctx, "pumpkin soup", 480); err != nil {
		t.Fatal(err)
	}
	s.waitHolding("every register holds the soup again", soup, heldProduct{held: true, codes: codes}, r1, r2, r3)
	waitFor(t, "the shop settled with the soup back", s.converged)
	s.noRejections()
}

// TestBarcodesReachExactlyTheRegistersOfTheirShop adds a product to the
// corner shop, and another shop with a register of its own and a product:
// each register holds exactly its own shop's products and their barcodes,
// the new product's among them, and none of the other shop's.
func TestBarcodesReachExactlyTheRegistersOfTheirShop(t *testing.T) {
	t.Parallel()
	s := startShop(t, true)
	kiosk, kioskShop, tea := uuid.New(), uuid.New(), uuid.New()
	tx, err := s.ho.pool.Begin(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(s.ctx)
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{"INSERT INTO shop.shops (id, name) VALUES ($1, 'Station kiosk')", []any{kioskShop}},
		{"INSERT INTO shop.registers (id, shop_id, name) VALUES ($1, $2, 'kiosk till')", []any{kiosk, kioskShop}},
		{"INSERT INTO shop.products (id, shop_id, name, price_cents, updated_at) VALUES ($1, $2, 'tea', 180, now())", []any{tea, kioskShop}},
	} {
		if _, err := tx.Exec(s.ctx, q.sql, q.args...); err != nil {
			t.Fatal(err)
		}
	}
	if err := giveBarcodes(s.ctx, tx, tea); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(s.ctx); err != nil {
		t.Fatal(err)
	}
	secret, err := s.ho.engine.Credentials(s.ctx, kiosk)
	if err != nil {
		t.Fatal(err)
	}
	till, err := openRegister(s.ctx, nil, kiosk, "kiosk till", filepath.Join(s.data, "kiosk.db"), s.ho.url,
		httpsync.JoinToken(kiosk, secret), s.ho.codecs, testPoll, s.log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.stop()
		till.wait()
	})
	if err := s.ho.addProduct(s.ctx, "eclair", 280); err != nil {
		t.Fatal(err)
	}
	eclair := uuid.NewSHA1(shopID, []byte("eclair"))
	codes := barcodes(eclair)
	slices.Sort(codes)
	s.waitHolding("every corner register holds the eclair's barcodes", eclair, heldProduct{held: true, codes: codes}, s.regs...)
	waitFor(t, "every corner register holds exactly the corner shop's products and barcodes", func() error {
		diffs, err := s.differences(s.ctx)
		if err == nil && len(diffs) > 0 {
			err = fmt.Errorf("%d differences: %v", len(diffs), diffs)
		}
		return err
	})
	teaCodes := barcodes(tea)
	slices.Sort(teaCodes)
	waitFor(t, "the kiosk till holds the tea and its barcodes only", func() error {
		products, err := shopcheck.SQLiteRows(s.ctx, till.db, "SELECT name FROM products")
		if err != nil {
			return err
		}
		codes, err := shopcheck.SQLiteRows(s.ctx, till.db, "SELECT code FROM barcodes")
		if err != nil {
			return err
		}
		if !slices.Equal(products, []string{"tea"}) || !slices.Equal(codes, teaCodes) {
			return fmt.Errorf("it holds products %v, barcodes %v; want [tea], %v", products, codes, teaCodes)
		}
		return nil
	})
	for _, r := range s.regs {
		for _, code := range teaCodes {
			if n := localCount(t, r, "barcodes WHERE code = '"+code+"'"); n != 0 {
				t.Errorf("%s holds the kiosk's barcode %s", r.name, code)
			}
		}
	}
	s.noRejections()
}
