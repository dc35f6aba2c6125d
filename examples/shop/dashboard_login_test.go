package main

import (
	"net/http"
	"testing"

	"github.com/magicsync/magicsync/internal/pgtest"
)

// TestDemoDashboardNeedsItsPassword: the head office's dashboard, on the
// registers' listener, answers only those who give the user and password
// drawn at start; the others are asked for them (401, Basic), and are told
// nothing of the registers. Its health check needs none.
func TestDemoDashboardNeedsItsPassword(t *testing.T) {
	t.Parallel()
	s := openShop(t, pgtest.NewDatabase(t), t.TempDir(), false)
	if len(s.ho.dashboardPassword) < 20 {
		t.Fatalf("the dashboard's password %q is short", s.ho.dashboardPassword)
	}
	get := func(path, user, password string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.ho.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if user != "" || password != "" {
			req.SetBasicAuth(user, password)
		}
		resp, err := s.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for _, path := range []string{"/", "/status.json"} {
		for _, c := range []struct{ who, user, password string }{
			{"nobody", "", ""},
			{"a wrong password", dashboardUser, s.ho.dashboardPassword + "x"},
			{"another user", "admin", s.ho.dashboardPassword},
		} {
			resp := get(path, c.user, c.password)
			if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("GET %s as %s: %s, WWW-Authenticate %q; want 401 asking for a password", path, c.who, resp.Status, resp.Header.Get("WWW-Authenticate"))
			}
		}
		if resp := get(path, dashboardUser, s.ho.dashboardPassword); resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s with the password: %s", path, resp.Status)
		}
	}
	if resp := get("/healthz", "", ""); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz: %s", resp.Status)
	}
}
