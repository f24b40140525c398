// An unmodified Java service in miniature (it knows nothing of memgap): it handles requests that each
// make garbage and keep a record, until its cache holds MIB MiB; drops 90% of the cache; collects
// once (System.gc(), as a program does after a batch; not with "nogc"); rests REST seconds; exits.
//
//   java GrowDrop [MIB [REST [nogc]]]
import java.util.ArrayList;

public class GrowDrop {
    static byte[] sink; // each request's scratch buffer: garbage once the next one is made

    static void touch(byte[] b) {
        for (int j = 0; j < b.length; j += 4096) {
            b[j] = (byte) j;
        }
    }

    public static void main(String[] args) throws InterruptedException {
        int mib = args.length > 0 ? Integer.parseInt(args[0]) : 200;
        double rest = args.length > 1 ? Double.parseDouble(args[1]) : 2.0;
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
        }
        Thread.sleep((long) (rest * 1000));
        if (cache.size() < 0) {
            System.out.println(cache.get(0)[0]); // keeps the cache reachable to the end
        }
    }
}
