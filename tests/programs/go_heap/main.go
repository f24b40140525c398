// A Go program that grows, drops most of what it built, and rests: memgap's Go reader is read
// against the figures it prints of itself (runtime.ReadMemStats and runtime/metrics).
//
// Usage: go_heap [-entries N] [-keep PERCENT] [-hold] [-churn]
//
//	-hold: build and stay at the live size (nothing dropped), for the reading before the drop.
//	-churn: never rest: a goroutine allocates 1 KiB slices into a ring of 10,000 without pause.
//
// It prints "ready pid=PID" once at rest; then each line on stdin gets one line of key=value of its
// own figures (bytes), read at that moment; "tick" gets the longest gap its ticker saw (ns); EOF ends it.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"time"
)

type record struct {
	key     int
	payload []byte
	next    *record
}

var (
	table   map[int]*record
	slices  [][]byte
	longest atomic.Int64 // the longest gap between two ticks, ns
	gogc    int          // GOGC as the runtime held it at the start (the program never changes it)
)

func build(entries int) {
	table = make(map[int]*record, entries)
	for i := 0; i < entries; i++ {
		table[i] = &record{key: i, payload: make([]byte, 64+i%64)}
	}
	for i := 0; i < entries/32; i++ {
		s := make([]byte, 2048)
		for j := range s {
			s[j] = byte(i + j) // touched: resident
		}
		slices = append(slices, s)
	}
}

func drop(keep int) {
	kept := make(map[int]*record, len(table)*keep/100)
	for k, v := range table {
		if k%100 < keep {
			kept[k] = v
		}
	}
	table = kept
	slices = slices[: len(slices)*keep/100 : len(slices)*keep/100]
	slices = append([][]byte(nil), slices...)
}

func ticker() {
	last := time.Now()
	for {
		time.Sleep(2 * time.Millisecond)
		now := time.Now()
		if gap := now.Sub(last).Nanoseconds(); gap > longest.Load() {
			longest.Store(gap)
		}
		last = now
	}
}

func figures() string {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	var b strings.Builder
	fmt.Fprintf(&b, "HeapInuse=%d HeapIdle=%d HeapReleased=%d HeapSys=%d StackInuse=%d GCSys=%d "+
		"MSpanInuse=%d MCacheInuse=%d OtherSys=%d BuckHashSys=%d Sys=%d HeapAlloc=%d NumGC=%d",
		ms.HeapInuse, ms.HeapIdle, ms.HeapReleased, ms.HeapSys, ms.StackInuse, ms.GCSys,
		ms.MSpanInuse, ms.MCacheInuse, ms.OtherSys, ms.BuckHashSys, ms.Sys, ms.HeapAlloc, ms.NumGC)
	var samples []metrics.Sample
	for _, d := range metrics.All() {
		if strings.HasPrefix(d.Name, "/memory/classes/") || d.Name == "/gc/gogc:percent" ||
			d.Name == "/gc/gomemlimit:bytes" {
			samples = append(samples, metrics.Sample{Name: d.Name})
		}
	}
	metrics.Read(samples)
	named := map[string]bool{}
	for _, s := range samples {
		if s.Value.Kind() == metrics.KindUint64 {
			fmt.Fprintf(&b, " %s=%d", s.Name, s.Value.Uint64())
			named[s.Name] = true
		}
	}
	// Go before 1.21 has neither metric: the same figures from runtime/debug, under the same names
	if !named["/gc/gogc:percent"] {
		fmt.Fprintf(&b, " /gc/gogc:percent=%d", gogc)
	}
	if !named["/gc/gomemlimit:bytes"] {
		fmt.Fprintf(&b, " /gc/gomemlimit:bytes=%d", debug.SetMemoryLimit(-1)) // a negative limit only asks
	}
	return b.String()
}

func hasMetric(name string) bool {
	for _, d := range metrics.All() {
		if d.Name == name {
			return true
		}
	}
	return false
}

func churn() {
	ring := make([][]byte, 10000)
	for i := 0; ; i++ {
		ring[i%len(ring)] = make([]byte, 1024)
	}
}

func main() {
	entries := flag.Int("entries", 1500000, "map entries to build")
	keep := flag.Int("keep", 10, "percent of what was built to keep")
	hold := flag.Bool("hold", false, "keep everything: rest at the live size")
	busy := flag.Bool("churn", false, "allocate without pause")
	flag.Parse()
	if !hasMetric("/gc/gogc:percent") { // Go before 1.21: asked of runtime/debug, then put back at once
		gogc = debug.SetGCPercent(100)
		debug.SetGCPercent(gogc)
	}
	go ticker()
	if *busy {
		go churn()
	}
	build(*entries)
	if !*hold {
		drop(*keep)
	}
	runtime.GC()
	fmt.Printf("ready pid=%d\n", os.Getpid())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "tick" {
			fmt.Printf("longest_tick_gap_ns=%d\n", longest.Swap(0))
		} else {
			fmt.Println(figures())
		}
	}
	runtime.KeepAlive(table)
	runtime.KeepAlive(slices)
}
