package server

import "testing"

// A pass that appended to some groups' logs makes only their built ranges
// stale: the other groups' stay cached, and a range built before the bump
// of its group is not cached after it.
func TestRangeCacheForgetsOnlyTheGroupsThatGrew(t *testing.T) {
	t.Parallel()
	c := newRangeCache(1 << 20)
	build := func(grp, from, to int64) *builtRange {
		return &builtRange{key: rangeKey{grp, from, to}, gen: c.generation(grp), size: 100}
	}
	c.put(build(1, 0, 10))
	c.put(build(2, 0, 10))
	late := build(1, 10, 20) // built before the bump below, put after it
	c.bumpGroups([]int64{1})
	c.put(late)
	if c.get(rangeKey{1, 0, 10}) != nil {
		t.Error("group 1's range survived a pass that appended to group 1")
	}
	if c.get(rangeKey{1, 10, 20}) != nil {
		t.Error("a range of group 1 built before its bump was cached after it")
	}
	if c.get(rangeKey{2, 0, 10}) == nil {
		t.Error("group 2's range was forgotten by a pass that appended only to group 1")
	}
	if c.size != 100 {
		t.Errorf("cache size %d after the bump; want 100 (group 2's range alone)", c.size)
	}
	c.put(build(1, 10, 20))
	if c.get(rangeKey{1, 10, 20}) == nil {
		t.Error("a range of group 1 built after its bump was not cached")
	}
	c.bump()
	if c.get(rangeKey{2, 0, 10}) != nil || c.get(rangeKey{1, 10, 20}) != nil || c.size != 0 {
		t.Errorf("bump left ranges cached (size %d)", c.size)
	}
}
