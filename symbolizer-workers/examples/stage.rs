use kiln_symbolizer_workers::{ExtractOptions, Ksym, extract, ksym};
use std::hint::black_box;
fn main() {
    let path = std::env::args().nth(1).unwrap();
    let uniform = std::env::args().nth(2).is_some();
    let e = extract(std::path::Path::new(&path), &ExtractOptions::default()).unwrap();
    let bytes = ksym::encode(&e.table);
    drop(e);
    let k = Ksym::open(&bytes).unwrap();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let hot: Vec<usize> = (0..(k.len() / 100).max(50))
        .map(|_| (next() % k.len() as u64) as usize)
        .collect();
    let addrs: Vec<u64> = (0..200_000)
        .map(|_| {
            let r = if uniform {
                (next() % k.len() as u64) as usize
            } else {
                hot[(next() % hot.len() as u64) as usize]
            };
            let (s, e) = k.range(r).unwrap();
            s + next() % (e - s)
        })
        .collect();
    let mut frames = Vec::new();
    let mut sink = 0usize;
    let mut best = f64::MAX;
    let mut depth = 0;
    for _ in 0..10 {
        let t = std::time::Instant::now();
        for &a in &addrs {
            k.lookup(a, &mut frames);
            depth += frames.len();
            for f in &frames {
                sink += f.function().map_or(0, str::len)
                    + f.file().map_or(0, str::len)
                    + f.line as usize;
            }
        }
        best = best.min(t.elapsed().as_secs_f64() * 1e9 / 2e5);
    }
    println!("{best:.1} ns, mean depth {:.2}", depth as f64 / 2e6);
    black_box(sink);
}
