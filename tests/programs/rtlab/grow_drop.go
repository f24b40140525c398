// An unmodified Go service in miniature (it knows nothing of memgap): it handles requests that each
// make garbage and keep a record, until its cache holds MIB MiB; drops 90% of the cache; with "gc",
// collects once (runtime.GC(), as a program does after a batch); rests REST seconds (or, with REST
// "until:DIR", until DIR/read-PID exists, PID its own: the tests say so once memgap has read it at rest;
// 120 s at most); with FILE, appends its own VmRSS at the end of its rest there (a line "vmrss_kib=N":
// the tests' witness); exits.
//
//	grow_drop [MIB [REST|until:DIR [gc|nogc [FILE]]]]
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

var sink []byte // each request's scratch buffer: garbage once the next one is made

func touch(b []byte) {
	for j := 0; j < len(b); j += 4096 {
		b[j] = byte(j)
	}
}

func main() {
	mib, rest, until, collect := 200, 2.0, "", false
	if len(os.Args) > 1 {
		mib, _ = strconv.Atoi(os.Args[1])
	}
	if len(os.Args) > 2 {
		if dir, ok := strings.CutPrefix(os.Args[2], "until:"); ok {
			until = dir
		} else {
			rest, _ = strconv.ParseFloat(os.Args[2], 64)
		}
	}
	collect = len(os.Args) > 3 && os.Args[3] == "gc"
	cache := make([][]byte, 0, mib*16)
	for i := 0; i < mib*16; i++ { // a 64 KiB record per request, and 256 KiB of scratch
		sink = make([]byte, 256<<10)
		touch(sink)
		record := make([]byte, 64<<10)
		touch(record)
		cache = append(cache, record)
	}
	sink = nil
	for i := range cache { // 90% of the cache expires
		if i%10 != 0 {
			cache[i] = nil
		}
	}
	if collect {
		runtime.GC()
	}
	if until != "" {
		restUntil(filepath.Join(until, fmt.Sprintf("read-%d", os.Getpid())))
	} else {
		time.Sleep(time.Duration(rest * float64(time.Second)))
	}
	if len(os.Args) > 4 {
		report(os.Args[4])
	}
	runtime.KeepAlive(cache)
}

// restUntil rests until the file at path exists (a stat every 20 ms: no work that would end a quiet
// spell), 120 s at most.
func restUntil(path string) {
	for waited := 0; waited < 120000; waited += 20 {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// report appends this process's VmRSS, as the kernel counts it now, to the file at path.
func report(path string) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		panic(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				panic(err)
			}
			fmt.Fprintf(f, "vmrss_kib=%s\n", strings.Fields(line)[1])
			f.Close()
		}
	}
}
