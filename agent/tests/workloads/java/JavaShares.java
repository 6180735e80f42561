/*
 * A Java workload with known shares of its time, for the agent's JVM
 * tests (agent/tests/jvm.rs).
 *
 * Every 20 ms period it spends 10 ms in parse(), 7 ms in render() and
 * 3 ms in digest() (SHA-256 through java.security: JDK methods under a
 * method of the workload). So 50/35/15 of its CPU time, all of it under
 * main. The loops check the clock every few hundred iterations, so each
 * method is hot enough for the JIT to compile it (C1, then C2) when the
 * JVM is let to.
 *
 * Usage: java JavaShares.java SECONDS   (or javac, then java JavaShares)
 */

import java.security.MessageDigest;

public final class JavaShares {
    static final long PERIOD_NS = 20_000_000L;
    static final long PARSE_NS = 10_000_000L;
    static final long RENDER_NS = 17_000_000L;
    // Small enough that one hash, even interpreted (-Xint), takes well
    // under digest's 3 ms: a longer one would overrun its share.
    static final byte[] DATA = "kiln".repeat(64).getBytes();

    static volatile long sink;

    static long parse(long until) {
        long n = 0;
        while (System.nanoTime() < until) {
            for (int i = 0; i < 200; i++) {
                n += (long) i * i % 7;
            }
        }
        return n;
    }

    static double render(long until) {
        double s = 0;
        while (System.nanoTime() < until) {
            for (int i = 0; i < 200; i++) {
                s += (i ^ 0x55) / 3.0;
            }
        }
        return s;
    }

    static byte[] digest(long until, MessageDigest sha) {
        byte[] h = null;
        while (System.nanoTime() < until) {
            h = sha.digest(DATA);
        }
        return h;
    }

    public static void main(String[] args) throws Exception {
        double seconds = Double.parseDouble(args[0]);
        MessageDigest sha = MessageDigest.getInstance("SHA-256");
        long end = System.nanoTime() + (long) (seconds * 1e9);
        while (System.nanoTime() < end) {
            long start = System.nanoTime();
            sink += parse(start + PARSE_NS);
            sink += (long) render(start + RENDER_NS);
            byte[] h = digest(start + PERIOD_NS, sha);
            if (h != null) {
                sink += h[0];
            }
        }
    }
}
