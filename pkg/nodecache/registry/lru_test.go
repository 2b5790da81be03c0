package registry

import (
	"fmt"
	"testing"
)

// The cache keeps the cacheSize most recently used entries.
func TestLRU(t *testing.T) {
	var c lru[int]
	for i := range cacheSize + 10 {
		c.put(fmt.Sprint(i), i)
		if i == cacheSize-1 {
			c.get("0") // used again: kept
		}
	}
	if c.len() != cacheSize {
		t.Fatalf("%d entries, want %d", c.len(), cacheSize)
	}
	if _, ok := c.get("0"); !ok {
		t.Error("the entry used again was dropped")
	}
	if _, ok := c.get("1"); ok {
		t.Error("the least recently used entry was kept")
	}
	if v, ok := c.get(fmt.Sprint(cacheSize + 9)); !ok || v != cacheSize+9 {
		t.Errorf("the newest entry: %d, %v", v, ok)
	}
}
