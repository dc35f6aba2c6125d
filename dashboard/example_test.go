package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/dashboard"
	"github.com/magicsync/magicsync/server"
)

// fixed is a Source answering fixed statuses; a host passes its
// *server.Server instead.
type fixed []server.ReplicaStatus

func (f fixed) Status(context.Context) ([]server.ReplicaStatus, error) { return f, nil }

func Example() {
	reg1, reg2 := uuid.MustParse("6f1c9a52-0000-4000-8000-000000000001"), uuid.MustParse("6f1c9a52-0000-4000-8000-000000000002")
	names := map[uuid.UUID]string{reg1: "register 1", reg2: "register 2"}

	// With a server: src := s (a *server.Server from server.New).
	src := fixed{
		{ID: reg1, Online: true, LastSeen: time.Now(), Tables: []server.TableStatus{{Table: "products", Holds: 7, Should: 7}}},
		{ID: reg2, Online: false, LastSeen: time.Now().Add(-time.Hour), Queued: 3,
			Tables: []server.TableStatus{{Table: "products", Holds: 5, Should: 7}, {Table: "receipts", Unsent: 4, Filed: 120}}},
	}

	mux := http.NewServeMux()
	mux.Handle("/sync/dashboard/", http.StripPrefix("/sync/dashboard", dashboard.New(src, dashboard.Options{
		Title: "Shop registers",
		Names: func(id uuid.UUID) string { return names[id] },
		// Operators log in with this user and password; a host with its own
		// login checks its session here instead (or wraps the handler in
		// its own middleware and sets Public).
		Authorize: dashboard.BasicAuth("operator", "correct horse battery staple"),
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	req, err := http.NewRequest(http.MethodGet, srv.URL+"/sync/dashboard/status.json", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	req.SetBasicAuth("operator", "correct horse battery staple")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer res.Body.Close()
	var ov dashboard.Overview
	if err := json.NewDecoder(res.Body).Decode(&ov); err != nil {
		fmt.Println(err)
		return
	}
	s := ov.Summary
	fmt.Printf("%d replicas, %d online, %d need attention, %d rows on their way up\n", s.Replicas, s.Online, s.Attention, s.Unsent)
	for _, r := range ov.Replicas {
		fmt.Println(r.Name, r.Attention)
	}
	// Output:
	// 2 replicas, 1 online, 1 need attention, 4 rows on their way up
	// register 2 [offline holds 5 of 7 products]
	// register 1 []
}
