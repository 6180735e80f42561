/*
 * A small method that C2 inlines into its caller, for the agent's JVM
 * tests (agent/tests/jvm.rs): mix() is a few instructions, called in
 * hot()'s loop, so once hot() is compiled by C2 no call to mix() remains,
 * and its time is only found through the compiled method's scopes.
 *
 * Usage: java Inlined SECONDS
 */
public final class Inlined {
    static volatile long sink;

    static int mix(int x) {
        int y = x * 0x9E3779B1;
        y ^= y >>> 15;
        y *= 0x85EBCA77;
        return y ^ (y >>> 13);
    }

    static long hot(int n) {
        long s = 0;
        for (int i = 0; i < n; i++) {
            s += mix(i);
        }
        return s;
    }

    public static void main(String[] args) {
        long end = System.nanoTime() + (long) (Double.parseDouble(args[0]) * 1e9);
        while (System.nanoTime() < end) {
            sink += hot(100_000);
        }
    }
}
