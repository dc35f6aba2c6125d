package enum

import "testing"

type color uint8

func TestNameSaysTheTablesNameOrTheNumber(t *testing.T) {
	names := []string{1: "red", 2: "green"}
	for _, c := range []struct {
		v    color
		want string
	}{
		{1, "red"},
		{2, "green"},
		{0, "color(0)"},
		{3, "color(3)"},
		{255, "color(255)"},
	} {
		if got := Name(names, c.v, "color"); got != c.want {
			t.Errorf("Name(%d) = %q, want %q", c.v, got, c.want)
		}
	}
	if got := Name([]string{"a"}, -1, "n"); got != "n(-1)" {
		t.Errorf("Name(-1) = %q, want n(-1)", got)
	}
}
