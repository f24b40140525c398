// An unmodified Java service in miniature (it knows nothing of memgap): it handles requests that each
// make garbage and keep a record, until its cache holds MIB MiB; drops 90% of the cache; collects
// once (System.gc(), as a program does after a batch; not with "nogc"); rests REST seconds (or, with REST
// "until:DIR", until DIR/read-PID exists, PID its own: the tests say so once memgap has read it at rest;
// 120 s at most); with FILE, appends its own VmRSS at the end of its rest there (a line "vmrss_kib=N":
// the tests' witness); exits.
//
//   java GrowDrop [MIB [REST|until:DIR [gc|nogc [FILE]]]]
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;

public class GrowDrop {
    static byte[] sink; // each request's scratch buffer: garbage once the next one is made

    static void touch(byte[] b) {
        for (int j = 0; j < b.length; j += 4096) {
            b[j] = (byte) j;
        }
    }

    // appends this process's VmRSS, as the kernel counts it now, to the file at path
    static void report(String path) throws IOException {
        for (String line : Files.readAllLines(Paths.get("/proc/self/status"))) {
            if (line.startsWith("VmRSS:")) {
                String kib = line.split("\\s+")[1];
                Files.write(Paths.get(path), ("vmrss_kib=" + kib + "\n").getBytes(StandardCharsets.US_ASCII),
                            StandardOpenOption.CREATE, StandardOpenOption.APPEND);
            }
        }
    }

    static long vmrssKib() throws IOException {
        for (String line : Files.readAllLines(Paths.get("/proc/self/status"))) {
            if (line.startsWith("VmRSS:")) {
                return Long.parseLong(line.split("\\s+")[1]);
            }
        }
        return -1;
    }

    // G1 gives the memory a collection freed back in the background (JDK 17): on a loaded machine that
    // took over a second once, so the rest begins when VmRSS has held for 300 ms (3 s at most)
    static void settle() throws InterruptedException, IOException {
        long last = vmrssKib(), held = 0;
        for (int waited = 0; waited < 3000 && held < 300; waited += 50) {
            Thread.sleep(50);
            long now = vmrssKib();
            held = now == last ? held + 50 : 0;
            last = now;
        }
    }

    // rests until the file at path exists (checked every 20 ms: no work that would end a quiet spell),
    // 120 s at most
    static void restUntil(String path) throws InterruptedException {
        for (int waited = 0; waited < 120000 && !Files.exists(Paths.get(path)); waited += 20) {
            Thread.sleep(20);
        }
    }

    public static void main(String[] args) throws InterruptedException, IOException {
        int mib = args.length > 0 ? Integer.parseInt(args[0]) : 200;
        String until = args.length > 1 && args[1].startsWith("until:") ? args[1].substring(6) : null;
        double rest = args.length > 1 && until == null ? Double.parseDouble(args[1]) : 2.0;
        ArrayList<byte[]> cache = new ArrayList<>();
        for (int i = 0; i < mib * 16; i++) { // a 64 KiB record per request, and 256 KiB of scratch
            sink = new byte[256 << 10];
            touch(sink);
            byte[] record = new byte[64 << 10];
            touch(record);
            cache.add(record);
        }
        sink = null;
        for (int i = 0; i < cache.size(); i++) { // 90% of the cache expires
            if (i % 10 != 0) {
                cache.set(i, null);
            }
        }
        if (args.length < 3 || !args[2].equals("nogc")) {
            System.gc();
            settle();
        }
        if (until != null) {
            restUntil(Paths.get(until, "read-" + ProcessHandle.current().pid()).toString());
        } else {
            Thread.sleep((long) (rest * 1000));
        }
        if (args.length > 3) {
            report(args[3]);
        }
        if (cache.size() < 0) {
            System.out.println(cache.get(0)[0]); // keeps the cache reachable to the end
        }
    }
}
