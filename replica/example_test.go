package replica_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	_ "modernc.org/sqlite"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/replica"
)

// Product is a catalog the head office writes and the register holds.
type Product struct {
	ID         uuid.UUID `db:"id" sync:"key"`
	Name       string    `db:"name"`
	PriceCents int64     `db:"price_cents"`
	UpdatedAt  time.Time `db:"updated_at" sync:"version"`
}

func (Product) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "products", Mirror: magicsync.Catalog, Sync: magicsync.Broadcast()}
}

// Receipt is a record the register writes and the head office files.
type Receipt struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	ID         uuid.UUID `db:"id" sync:"key"`
	TotalCents int64     `db:"total_cents"`
	RungAt     time.Time `db:"rung_at" sync:"version"`
}

func (Receipt) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "receipts", Mirror: magicsync.Record, Origin: "register_id"}
}

// The DSN sets what the engine requires of every connection: a journal
// that rolls back, durable commits, and recursive triggers.
const durable = "?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=recursive_triggers(1)&_pragma=foreign_keys(1)"

const schema = `
CREATE TABLE products (id BLOB PRIMARY KEY, name TEXT NOT NULL, price_cents INTEGER NOT NULL, updated_at TEXT NOT NULL);
CREATE TABLE receipts (register_id BLOB NOT NULL, id BLOB NOT NULL, total_cents INTEGER NOT NULL, rung_at TEXT NOT NULL,
	PRIMARY KEY (register_id, id));`

// A register sets up its database, opens its replica, and writes a
// receipt: the engine notes it, to send it up on the upward loop's next
// turn (Run) and keep it until the head office confirms it filed it.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "register-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "register.db")+durable)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, schema); err != nil {
		log.Fatal(err)
	}
	codecs, err := magicsync.NewCodecs(Product{}, Receipt{})
	if err != nil {
		log.Fatal(err)
	}
	// The engine's own tables and the triggers that note every write.
	if err := replica.Install(ctx, db, codecs); err != nil {
		log.Fatal(err)
	}
	me := uuid.MustParse("0190e5a4-7f3c-7d2e-9a41-5b6c7d8e9f01")
	// The uplink is the transport's (httpsync.Client is one); this one
	// only says it cannot reach the head office, which Run retries.
	offline := replica.UplinkFunc(func(context.Context, uuid.UUID, string, []byte) error {
		return replica.TransportError(true, errors.New("no network"))
	})
	r, err := replica.New(ctx, db, codecs, replica.Me(me), offline, replica.Settings{})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()

	if _, err := db.ExecContext(ctx, "INSERT INTO receipts VALUES (?, ?, 450, ?)", me, uuid.New(), time.Now().UTC()); err != nil {
		log.Fatal(err)
	}
	// The head office's tables are its own: the register cannot write them.
	_, err = db.ExecContext(ctx, "INSERT INTO products VALUES (?, 'coffee', 150, ?)", uuid.New(), time.Now().UTC())
	fmt.Println("writing a product:", err != nil)

	st, err := r.Status(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("lane %s: %d row(s) to send\n", st.Lanes[0].Name, st.Lanes[0].Unsent)
	// Output:
	// writing a product: true
	// lane main: 1 row(s) to send
}

// New refuses a connection on which the engine could not keep its word,
// naming the PRAGMA and how to set it in the DSN.
func ExampleNew_unsafeConnection() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "register-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	// synchronous NORMAL: a commit could be lost in a power cut.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "register.db")+"?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=recursive_triggers(1)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	codecs, err := magicsync.NewCodecs(Product{}, Receipt{})
	if err != nil {
		log.Fatal(err)
	}
	_, err = replica.New(ctx, db, codecs, replica.Me(uuid.New()), replica.UplinkFunc(nil), replica.Settings{})
	fmt.Println(errors.Is(err, replica.ErrUnsafe))
	// Output: true
}

// Each message the transport brings is applied, and acknowledged only
// once Receive returned nil; a message that comes again changes nothing.
func ExampleEndpoint_Receive() {
	ctx := context.Background()
	var r *replica.Replica // from replica.New
	e := r.Endpoint()
	type delivery struct {
		id   uint64
		body []byte
	}
	var next chan delivery        // what the transport brings down
	var ack func(id uint64) error // tells the server a message was applied
	for d := range next {
		got, err := e.Receive(ctx, d.body)
		if err != nil {
			// Storage failed, or the message speaks a newer protocol: not
			// acknowledged, it comes again.
			log.Printf("message %d not applied: %v", d.id, err)
			continue
		}
		log.Printf("message %d: %d product(s) applied, %d row(s) left out", d.id, len(got.Applied["products"]), got.Rejected)
		if err := ack(d.id); err != nil {
			log.Printf("message %d not acknowledged, and comes again: %v", d.id, err)
		}
	}
}

// Footer is a setting: the register owns it, and the head office may wish
// its text another.
type Footer struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	Text       string    `db:"text" sync:"desired"`
	ChangedAt  time.Time `db:"changed_at" sync:"version"`
}

func (Footer) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "footers", Mirror: magicsync.Setting, Origin: "register_id"}
}

// Printer is the receipt printer, which takes a new footer when it is on,
// and when the footer fits its 40 characters.
type Printer struct {
	On *atomic.Bool
}

// CarryOut answers what the printer answers: a footer too long is refused
// for good; while the printer is off, the wish waits.
func (p Printer) CarryOut(ctx context.Context, w replica.Wish[Footer]) replica.Outcome {
	if utf8.RuneCountInString(w.Wanted.Text) > 40 {
		return replica.Refused(fmt.Sprintf("%q is longer than the printer's 40 characters", w.Wanted.Text))
	}
	if !p.On.Load() {
		return replica.Later("the printer is off")
	}
	// A real printer is sent the footer here. Applied: the engine writes
	// it into footers, moves its version on, and tells the head office.
	return replica.Applied()
}

// A handler answers each wish with what the device answered: Applied,
// Refused(why) or Later(why). The engine offers a wish that waits again.
func ExampleCarryOut() {
	ctx := context.Background()
	printer := Printer{On: new(atomic.Bool)}
	wish := replica.Wish[Footer]{Wanted: Footer{Text: "Merci, à bientôt !"}, Number: 1, Note: "ann at the office"}
	fmt.Println(printer.CarryOut(ctx, wish))
	printer.On.Store(true)
	fmt.Println(printer.CarryOut(ctx, wish))
	wish.Wanted.Text = "Thank you for shopping with us, see you soon!"
	fmt.Println(printer.CarryOut(ctx, wish))
	// Output:
	// waiting: the printer is off
	// applied
	// refused: "Thank you for shopping with us, see you soon!" is longer than the printer's 40 characters
}

// Every setting table needs a handler: New refuses one without, saying
// how to give it one. Direct is the handler of a setting that lives only
// in the database.
func ExampleHandle() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "register-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "register.db")+durable)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE TABLE footers (register_id BLOB PRIMARY KEY, text TEXT NOT NULL, changed_at TEXT NOT NULL)"); err != nil {
		log.Fatal(err)
	}
	codecs, err := magicsync.NewCodecs(Footer{})
	if err != nil {
		log.Fatal(err)
	}
	if err := replica.Install(ctx, db, codecs); err != nil {
		log.Fatal(err)
	}
	me := replica.Me(uuid.MustParse("0190e5a4-7f3c-7d2e-9a41-5b6c7d8e9f01"))
	uplink := replica.UplinkFunc(func(context.Context, uuid.UUID, string, []byte) error { return nil })

	_, err = replica.New(ctx, db, codecs, me, uplink, replica.Settings{})
	fmt.Println(err)

	settings := replica.Settings{Wishes: replica.Wishes{replica.Handle[Footer](Printer{On: new(atomic.Bool)})}}
	r, err := replica.New(ctx, db, codecs, me, uplink, settings)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	// The printer is back on: the wishes that wait are offered again now,
	// by Run.
	r.OfferWishes()
	fmt.Println("ready")
	// Output:
	// magicsync/replica: replica settings: setting table "footers" has no wish handler: add replica.Handle[replica_test.Footer](h) to Settings.Wishes, with h your CarryOut[replica_test.Footer] — or replica.Direct[replica_test.Footer]{} for a setting that lives only in the database
	// ready
}

// A register runs the head office's commands through handlers named as
// the head office names the commands. A handler runs at most once per
// command: a register stopped while one runs answers it interrupted.
func ExampleCommands() {
	settings := replica.Settings{
		Commands: replica.Commands{
			"print-test-page": func(ctx context.Context, c replica.Command) ([]byte, error) {
				// Talk to the printer here; the result goes to the head office.
				return []byte("printed, " + c.Note), nil
			},
			"recount-drawer": func(ctx context.Context, c replica.Command) ([]byte, error) {
				return nil, errors.New("the drawer is open")
			},
		},
		CommandsTimeout: time.Minute,
	}
	result, err := settings.Commands["print-test-page"](context.Background(), replica.Command{Name: "print-test-page", Note: "ann"})
	fmt.Println(string(result), err)
	// Output:
	// printed, ann <nil>
}
