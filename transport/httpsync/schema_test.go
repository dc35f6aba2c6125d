package httpsync

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"

	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/shoptest/shopserver"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

// A replica reads its tables, as the server declares them, from GET
// schema: names, which side writes each, columns with kinds and roles,
// key and origin; and every answer names the protocol the server speaks,
// so that a replica knows it before it sends anything.
func TestTheSchemaDescribesTheReplicasTablesAndEveryAnswerTheProtocol(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, shopserver.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	codecs := shoptest.Codecs(t, shoptest.Product{}, shoptest.Receipt{}, shoptest.Setting{})
	opts := server.Options{Replicas: shoptest.Replicas, Logger: quiet()}
	shopserver.InstallTriggers(t, pool, codecs, opts)
	s, err := server.New(ctx, pool, codecs, opts)
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.New()
	if _, err := pool.Exec(ctx, `INSERT INTO shop.registers VALUES ($1)`, id); err != nil {
		t.Fatal(err)
	}
	secret, err := s.Credentials(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewHandler(ForServer(s), HandlerOptions{Logger: quiet()}))
	t.Cleanup(srv.Close)
	get := func(token string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest("GET", srv.URL+"/sync/"+id.String()+"/schema", nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, body
	}

	resp, _ := get("")
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without a token: %d, want 401", resp.StatusCode)
	}
	if got := resp.Header.Get(HeaderProtocol); got != strconv.Itoa(int(wire.Protocol)) {
		t.Errorf("a refusal says protocol %q, want %d", got, wire.Protocol)
	}
	resp, body := get(JoinToken(id, secret))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("schema: %d %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get(HeaderProtocol); got != strconv.Itoa(int(wire.Protocol)) {
		t.Errorf("the schema's answer says protocol %q, want %d", got, wire.Protocol)
	}
	var sc syncpb.Schema
	if err := proto.Unmarshal(body, &sc); err != nil {
		t.Fatal(err)
	}
	if sc.Protocol != wire.Protocol || len(sc.Tables) != 3 {
		t.Fatalf("schema: protocol %d, %d tables; want %d, 3", sc.Protocol, len(sc.Tables), wire.Protocol)
	}
	byName := map[string]*syncpb.TableSchema{}
	for _, ts := range sc.Tables {
		byName[ts.Name] = ts
	}
	products, receipts, settings := byName["products"], byName["receipts"], byName["settings"]
	if products.GetMirror() != syncpb.Mirror_MIRROR_CATALOG || receipts.GetMirror() != syncpb.Mirror_MIRROR_RECORD ||
		settings.GetMirror() != syncpb.Mirror_MIRROR_SETTING {
		t.Errorf("mirrors: products %v, receipts %v, settings %v", products.GetMirror(), receipts.GetMirror(), settings.GetMirror())
	}
	if got := receipts.GetKey(); len(got) != 2 || got[0] != "register_id" || got[1] != "id" || receipts.GetOrigin() != "register_id" {
		t.Errorf("receipts: key %v, origin %q; want [register_id id], register_id", got, receipts.GetOrigin())
	}
	kinds := map[string]string{}
	for _, c := range products.GetColumns() {
		kinds[c.GetName()] = c.GetKind()
	}
	if kinds["id"] != "uuid" || kinds["name"] != "text" || kinds["price_cents"] != "int" || kinds["updated_at"] != "time" {
		t.Errorf("products' column kinds: %v", kinds)
	}
	var desired, version int
	for _, c := range settings.GetColumns() {
		if c.GetDesired() {
			desired++
		}
		if c.GetVersion() {
			version++
		}
	}
	if desired == 0 || version != 1 {
		t.Errorf("settings: %d desired and %d version columns; want some and one", desired, version)
	}
}
