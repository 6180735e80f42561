// A Node.js workload with known shares of its CPU time, for the agent's
// perf-map test (agent/tests/perf_map.rs): main() calls sixty(), thirty()
// and ten(), which run 6, 3 and 1 units of the same loop (spin), so
// 60/30/10 of its time is in each, all of it under main(). Shares by
// iteration counts, not by the clock, so they hold however often a busy
// host preempts it. Run with `node --perf-basic-prof
// --interpreted-frames-native-stack` so V8 writes /tmp/perf-PID.map, and
// with `--no-turbo-inlining`: otherwise TurboFan soon compiles main()
// with the others inlined into it, one piece of code the map calls main,
// and every profiler (perf too) shows main() alone.
//
// Usage: node --perf-basic-prof --interpreted-frames-native-stack
//        --no-turbo-inlining shares.js SECONDS
'use strict';

const UNIT = 20000;

function spin(n, seed) {
  let h = seed | 0;
  for (let i = 0; i < n; i++) {
    h = (Math.imul(h ^ i, 0x9e3779b1) + 0x7f4a7c15) | 0;
    h ^= h >>> 13;
  }
  return h;
}

function sixty(seed) {
  return spin(6 * UNIT, seed);
}

function thirty(seed) {
  return spin(3 * UNIT, seed);
}

function ten(seed) {
  return spin(UNIT, seed);
}

function main(seconds) {
  const end = Date.now() + seconds * 1000;
  let h = 1;
  while (Date.now() < end) {
    h = sixty(h);
    h = thirty(h);
    h = ten(h);
  }
  return h;
}

console.log(main(Number(process.argv[2] || 10)));
