// A JVM program that grows its heap, drops most of it on request, and rests, printing its own
// figures (MemoryMXBean, every MemoryPoolMXBean, a ticker's longest gap) for each line it reads.
// It knows nothing of memgap: the tests read it from outside and compare.
//
//   java -Xmx1g -XX:+UseG1GC JvmHeap [MiB to build, default 180]
//
// stdin: "" -> figures; "drop" -> keep every tenth object, System.gc(), figures; "gc" -> System.gc(),
// figures. Each answer is one line of key=value (bytes; the ticker's gap in microseconds).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.lang.management.MemoryMXBean;
import java.lang.management.MemoryPoolMXBean;
import java.lang.management.MemoryUsage;
import java.util.ArrayList;
import java.util.List;

public final class JvmHeap {
    /** A small object beside the arrays, so the heap holds more than byte[]. */
    static final class Node {
        final long id;
        final String name;
        Node next;

        Node(long id, Node next) {
            this.id = id;
            this.name = "node-" + id;
            this.next = next;
        }
    }

    static final List<Object> HELD = new ArrayList<>();
    static volatile long maxGapNanos;
    static volatile long ticks;

    public static void main(String[] args) throws Exception {
        long mib = args.length > 0 ? Long.parseLong(args[0]) : 180;
        startTicker();
        build(mib << 20);
        System.gc();
        System.out.println(figures());
        System.out.println("ready");
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            String command = line.trim();
            if (command.equals("drop")) {
                drop();
                System.gc();
            } else if (command.equals("gc")) {
                System.gc();
            }
            System.out.println(figures());
            System.out.flush();
        }
    }

    static void build(long bytes) {
        long made = 0;
        long id = 0;
        Node chain = null;
        while (made < bytes) {
            int size = 1024 + (int) (id % 7) * 1024;  // 1 to 7 KiB arrays, well under a G1 region
            byte[] block = new byte[size];
            block[0] = (byte) id;
            HELD.add(block);
            made += size + 16;
            chain = new Node(id++, (id % 64 == 0) ? null : chain);  // short chains of small objects
            HELD.add(chain);
            made += 80;
        }
    }

    static void drop() {
        List<Object> kept = new ArrayList<>();
        for (int i = 0; i + 1 < HELD.size(); i += 20) {  // one pair (an array, a node) in ten
            kept.add(HELD.get(i));
            kept.add(HELD.get(i + 1));
        }
        HELD.clear();
        HELD.addAll(kept);
        ((ArrayList<Object>) HELD).trimToSize();
    }

    static void startTicker() {
        Thread ticker = new Thread(() -> {
            long last = System.nanoTime();
            while (true) {
                try {
                    Thread.sleep(10);
                } catch (InterruptedException e) {
                    return;
                }
                long now = System.nanoTime();
                if (now - last > maxGapNanos) {
                    maxGapNanos = now - last;
                }
                last = now;
                ticks++;
            }
        }, "ticker");
        ticker.setDaemon(true);
        ticker.start();
    }

    static String figures() {
        MemoryMXBean memory = ManagementFactory.getMemoryMXBean();
        MemoryUsage heap = memory.getHeapMemoryUsage();
        MemoryUsage nonHeap = memory.getNonHeapMemoryUsage();
        StringBuilder out = new StringBuilder();
        out.append("heap.used=").append(heap.getUsed())
           .append(" heap.committed=").append(heap.getCommitted())
           .append(" heap.max=").append(heap.getMax())
           .append(" nonheap.used=").append(nonHeap.getUsed())
           .append(" nonheap.committed=").append(nonHeap.getCommitted());
        for (MemoryPoolMXBean pool : ManagementFactory.getMemoryPoolMXBeans()) {
            String name = pool.getName().replace(' ', '_').replace('\'', '_');
            MemoryUsage usage = pool.getUsage();
            out.append(" pool.").append(name).append(".used=").append(usage.getUsed())
               .append(" pool.").append(name).append(".committed=").append(usage.getCommitted());
        }
        out.append(" held=").append(HELD.size())
           .append(" tick.max_gap_us=").append(maxGapNanos / 1000)
           .append(" tick.count=").append(ticks);
        maxGapNanos = 0;
        return out.toString();
    }
}
