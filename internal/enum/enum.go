// Package enum names the values of the engine's small enumerations from a
// table, as their String methods say them.
package enum

import "fmt"

// Name returns names[v], or typ(v) — "Refusal(7)" — for a value the table
// does not name, so that a value from a newer build still prints.
func Name[T ~uint8 | ~int](names []string, v T, typ string) string {
	if i := int(v); i >= 0 && i < len(names) && names[i] != "" {
		return names[i]
	}
	return fmt.Sprintf("%s(%d)", typ, int(v))
}
