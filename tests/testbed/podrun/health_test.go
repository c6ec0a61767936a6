package main

import "testing"

func TestStatGroup(t *testing.T) {
	// A command name with a space and a parenthesis, as /proc shows one.
	line := "4242 (odd) name) S 1 4240 4240 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 500 123456789 2048"
	if pgid, ok := statGroup(line); !ok || pgid != 4240 {
		t.Fatalf("got pgid %d, ok %v", pgid, ok)
	}
	if _, ok := statGroup("garbage"); ok {
		t.Fatal("a line without a command name was read")
	}
}

func TestUnreclaimable(t *testing.T) {
	status := "Name:\tpontoon\nVmRSS:\t   40000 kB\nRssAnon:\t    9000 kB\nRssFile:\t   30000 kB\nRssShmem:\t    1000 kB\n"
	if got := unreclaimable(status); got != 10000*1024 {
		t.Fatalf("got %d, want anonymous and shared pages only (%d)", got, 10000*1024)
	}
}
