package main

import (
	"fmt"
	"strings"
)

// bounds.go is how every benchmark's figures are judged: one mechanism
// for floors, which the run enforces (a figure on the wrong side of one
// fails it), and goals, which it reports met or NOT met and which fail
// nothing. A bound names what it judges, the measured value, the limit
// and the comparison; the table prints each with its verdict, so that the
// run states no goal without saying whether it was met.

// comparison is the side of its limit a value must lie on.
type comparison int

const (
	atLeast comparison = iota + 1 // value ≥ limit: a floor
	atMost                        // value ≤ limit: a ceiling
)

func (c comparison) String() string {
	if c == atLeast {
		return "≥"
	}
	return "≤"
}

// holds reports whether value lies on the right side of limit.
func (c comparison) holds(value, limit float64) bool {
	if c == atLeast {
		return value >= limit
	}
	return value <= limit
}

// boundKind tells a floor, which the run enforces, from a goal, which it
// reports.
type boundKind int

const (
	floorBound boundKind = iota + 1
	goalBound
)

// subject is what a bound judges.
type subject int

const (
	ofFigure subject = iota + 1 // the result's figure
	ofRatio                     // the result's figure over its baseline
	ofValue                     // a value of the bound's own, named by name
)

// bound is a limit one measured value is judged against.
type bound struct {
	kind boundKind
	of   subject
	// name, value and unit are the value judged when of is ofValue
	// ("p99/p50", 2.48, ""); else the result's figure or ratio is.
	name  string
	value float64
	unit  string
	cmp   comparison
	// limit holds at full sizes. short, when shortToo, holds under
	// -short: a ratio to a baseline measured in the same run means the
	// same at any size, only noisier at small ones, so its floor under
	// -short is the full one less a margin. A floor of an absolute figure
	// (seconds, megabytes, deliveries per second) is set for the full
	// sizes and not judged at others.
	limit    float64
	short    float64
	shortToo bool
}

// ratioFloor is the least ratio of a result's figure to its baseline: full
// at full sizes, short under -short.
func ratioFloor(full, short float64) bound {
	return bound{kind: floorBound, of: ofRatio, cmp: atLeast, limit: full, short: short, shortToo: true}
}

// figureFloor is the least figure acceptable at full sizes.
func figureFloor(limit float64) bound {
	return bound{kind: floorBound, of: ofFigure, cmp: atLeast, limit: limit}
}

// ceiling is the most figure acceptable at full sizes.
func ceiling(limit float64) bound {
	return bound{kind: floorBound, of: ofFigure, cmp: atMost, limit: limit}
}

// ceilingAtAnySize is the most figure acceptable at every size: what must
// hold however small the run (nothing lost).
func ceilingAtAnySize(limit float64) bound {
	return bound{kind: floorBound, of: ofFigure, cmp: atMost, limit: limit, short: limit, shortToo: true}
}

// goal is a goal for a result's figure: reported met or NOT met.
func goal(cmp comparison, limit float64) bound {
	return bound{kind: goalBound, of: ofFigure, cmp: cmp, limit: limit, short: limit, shortToo: true}
}

// ratioGoal is a goal for the ratio of a result's figure to its baseline.
func ratioGoal(cmp comparison, limit float64) bound {
	return bound{kind: goalBound, of: ofRatio, cmp: cmp, limit: limit, short: limit, shortToo: true}
}

// goalOf is a goal for a value other than the result's figure (p99/p50).
func goalOf(name string, value float64, unit string, cmp comparison, limit float64) bound {
	return bound{kind: goalBound, of: ofValue, name: name, value: value, unit: unit, cmp: cmp, limit: limit, short: limit, shortToo: true}
}

// check is a bound applied to a result at the run's size.
type check struct {
	bound
	value  float64 // the value judged
	unit   string
	limit  float64 // the limit at the run's size
	judged bool    // false: a floor set for the full sizes, under -short
	met    bool
}

// checks applies the result's bounds at the run's size.
func (r result) checks(short bool) []check {
	out := make([]check, 0, len(r.bounds))
	for _, b := range r.bounds {
		c := check{bound: b, limit: b.limit, judged: true}
		switch b.of {
		case ofFigure:
			c.value, c.unit = r.figure, r.unit
		case ofRatio:
			c.value = r.ratio()
		case ofValue:
			c.value, c.unit = b.value, b.unit
		}
		if short {
			c.limit, c.judged = b.short, b.shortToo
		}
		if r.unmeasured {
			c.judged = false
		}
		c.met = c.judged && b.cmp.holds(c.value, c.limit)
		out = append(out, c)
	}
	return out
}

// subjectName is what the check judges, as the table names it: "ratio",
// a value's name, or nothing for the figure.
func (c check) subjectName() string {
	switch c.of {
	case ofRatio:
		return "ratio"
	case ofValue:
		return c.name
	}
	return ""
}

// limitText is the check's comparison and limit: "ratio ≥ 0.50", "≤ 12 ms".
func (c check) limitText(limit float64) string {
	var b strings.Builder
	if name := c.subjectName(); name != "" {
		b.WriteString(name + " ")
	}
	b.WriteString(c.cmp.String() + " " + formatNumber(limit))
	if c.unit != "" {
		b.WriteString(" " + c.unit)
	}
	return b.String()
}

// valueText is the value judged, with its unit.
func (c check) valueText() string {
	s := formatNumber(c.value)
	if c.unit != "" {
		s += " " + c.unit
	}
	return s
}

// floorText is the floor column's text for one floor: its limit at the
// run's size, and how it differs at the other.
func (c check) floorText(short bool) string {
	switch {
	case short && !c.judged:
		return c.limitText(c.bound.limit) + " at full size"
	case short && c.bound.short != c.bound.limit:
		return c.limitText(c.limit) + fmt.Sprintf(" (-short; full size %s %s)", c.cmp, formatNumber(c.bound.limit))
	case !short && c.shortToo && c.bound.short != c.bound.limit:
		return c.limitText(c.limit) + fmt.Sprintf(" (-short: %s %s)", c.cmp, formatNumber(c.bound.short))
	}
	return c.limitText(c.limit)
}

// goalText is the goal column's text for one goal: the goal, whether it
// was met, and the value when it is not the figure.
func (c check) goalText() string {
	verdict := "met"
	switch {
	case !c.judged:
		return c.limitText(c.limit) + ": not measured"
	case !c.met:
		verdict = "NOT met"
	}
	s := c.limitText(c.limit) + ": " + verdict
	if c.of != ofFigure {
		s += " (" + c.valueText() + ")"
	}
	return s
}

// failure says how a floor failed, naming the result and the value: what
// the run prints before it exits non-zero.
func (c check) failure(r result, short bool) string {
	side := "under its floor"
	if c.cmp == atMost {
		side = "over its ceiling"
	}
	at := ""
	if short {
		at = " for short sizes"
	}
	return fmt.Sprintf("%s: %s %s is %s %s%s", r.name, c.what(), c.valueText(), side, c.limitValue(), at)
}

// against says the value beside its floor or ceiling: "2 replica applies
// one-row messages: ratio 1.06, floor 0.7".
func (c check) against(r result) string {
	side := "floor"
	if c.cmp == atMost {
		side = "ceiling"
	}
	return fmt.Sprintf("%s: %s %s, %s %s", r.name, c.what(), c.valueText(), side, c.limitValue())
}

// limitValue is the limit at the run's size, with its unit.
func (c check) limitValue() string {
	s := formatNumber(c.limit)
	if c.unit != "" {
		s += " " + c.unit
	}
	return s
}

// what names the value judged in a sentence.
func (c check) what() string {
	if name := c.subjectName(); name != "" {
		return name
	}
	return "figure"
}

// margin is how far a judged floor's value lies from its limit, as a
// factor: 1 at the limit, above it when met. Zero when it cannot be told.
func (c check) margin() float64 {
	if c.value <= 0 || c.limit <= 0 {
		return 0
	}
	if c.cmp == atLeast {
		return c.value / c.limit
	}
	return c.limit / c.value
}

// formatNumber writes a value with the digits it needs: three significant
// ones for small values, none after the point from 100 on.
func formatNumber(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100 || v <= -100:
		return fmt.Sprintf("%.0f", v)
	case v >= 1 || v <= -1:
		return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
	}
	return fmt.Sprintf("%.3g", v)
}
