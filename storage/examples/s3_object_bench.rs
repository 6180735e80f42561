//! Object put/get throughput: the S3 store against the local-directory
//! store on the same objects, and the ratio.
//!
//! ```text
//! eval "$(scripts/s3-test-server.sh start /tmp/kiln-s3)"
//! cargo run --release -p kiln-storage --example s3_object_bench -- [SMALL] [LARGE_MIB]
//! ```
//!
//! Puts, then gets, SMALL objects of 64 KiB (default 200, a symbol file of
//! a small library), eight in flight, and one object of LARGE_MIB MiB
//! (default 64: a multipart upload of 8 MiB parts, as a big binary's
//! symbol file is), against each store; prints MiB/s and objects/s, and
//! S3 / local ratios. Every run writes under a fresh prefix and deletes
//! what it wrote.
//!
//! Measured on the 2-core development machine (load about 3), Garage 2.5
//! from `scripts/s3-test-server.sh` (sqlite metadata, one node, same
//! machine), defaults, three runs:
//!
//! ```text
//!             small put        small get         large put (64 MiB)   large get
//! local       307–310 MiB/s    1795–2182 MiB/s   268–1672 MiB/s       1139–1358 MiB/s
//! s3          48–52 MiB/s      145–157 MiB/s     145–148 MiB/s        352–386 MiB/s
//! ratio       0.16–0.17x       0.07–0.09x        0.09–0.55x           0.26–0.34x
//! ```
//!
//! (800 small objects/s into S3 against 4 900 into the directory; the
//! local large put swings with the fsync of 64 MiB, the S3 one does not.)
//! Symbol uploads happen once per executable, so even the slowest figure,
//! a 100 MB symbol file in under a second, is far from the ingest path.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt, stream};
use kiln_storage::{LocalObjectStore, ObjectKey, ObjectStore, S3ObjectStore, StoreError};

const SMALL_LEN: usize = 64 * 1024;
const IN_FLIGHT: usize = 8;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let small: usize = args.next().map_or(Ok(200), |a| a.parse())?;
    let large_mib: usize = args.next().map_or(Ok(64), |a| a.parse())?;
    let url = std::env::var("KILN_TEST_S3")
        .map_err(|_| "KILN_TEST_S3 is not set: eval \"$(scripts/s3-test-server.sh start DIR)\"")?;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
    let prefix = format!("bench/{}", nanos.as_millis());

    let dir = tempfile::tempdir()?;
    let local = LocalObjectStore::open(dir.path())?;
    let s3 = S3ObjectStore::from_url(&url)?;
    s3.check().await?;

    let load = Load {
        prefix,
        small,
        large: large_mib * 1024 * 1024,
    };
    let local_figures = run("local directory", &local, &load).await?;
    let s3_figures = run("s3", &s3, &load).await?;
    let names = ["small put", "small get", "large put", "large get"];
    let ratios: Vec<String> = names
        .iter()
        .zip(s3_figures.iter().zip(&local_figures))
        .map(|(name, (s3, local))| format!("{name} {:.3}x", s3 / local))
        .collect();
    println!("s3 / local: {}", ratios.join(", "));
    Ok(())
}

struct Load {
    prefix: String,
    small: usize,
    large: usize,
}

/// Runs the load against `store`, printing and returning the bytes per
/// second of small puts, small gets, the large put and the large get.
async fn run(name: &str, store: &dyn ObjectStore, load: &Load) -> Result<[f64; 4], StoreError> {
    let small_keys: Vec<ObjectKey> = (0..load.small)
        .map(|i| ObjectKey::new(&format!("{}/small/{i:06}.ksym", load.prefix)))
        .collect::<Result<_, _>>()?;
    let small_body = Bytes::from(pattern(SMALL_LEN));
    let large_key = ObjectKey::new(&format!("{}/large.ksym", load.prefix))?;
    let large_body = Bytes::from(pattern(load.large));

    let small_put = timed(|| async {
        stream::iter(&small_keys)
            .map(|key| store.put(key, small_body.clone()))
            .buffer_unordered(IN_FLIGHT)
            .try_collect::<Vec<()>>()
            .await
            .map(drop)
    })
    .await?;
    let small_get = timed(|| async {
        stream::iter(&small_keys)
            .map(|key| async move {
                let got = store.get(key).await?;
                assert_eq!(got.map(|b| b.len()), Some(SMALL_LEN), "{key}");
                Ok::<(), StoreError>(())
            })
            .buffer_unordered(IN_FLIGHT)
            .try_collect::<Vec<()>>()
            .await
            .map(drop)
    })
    .await?;
    let large_put = timed(|| store.put(&large_key, large_body.clone())).await?;
    let large_get = timed(|| async {
        let got = store.get(&large_key).await?;
        assert!(
            got.as_deref() == Some(&large_body[..]),
            "large object changed"
        );
        Ok(())
    })
    .await?;

    for key in small_keys.iter().chain([&large_key]) {
        store.delete(key).await?;
    }

    let small_bytes = (load.small * SMALL_LEN) as f64;
    let large_bytes = load.large as f64;
    let figures = [
        small_bytes / small_put.as_secs_f64(),
        small_bytes / small_get.as_secs_f64(),
        large_bytes / large_put.as_secs_f64(),
        large_bytes / large_get.as_secs_f64(),
    ];
    let mib = |bytes_per_s: f64| bytes_per_s / (1024.0 * 1024.0);
    let objects = |d: Duration| load.small as f64 / d.as_secs_f64();
    println!(
        "{name:>16}: small put {:7.1} MiB/s ({:6.0} obj/s), small get {:7.1} MiB/s ({:6.0} obj/s), \
         large put {:7.1} MiB/s, large get {:7.1} MiB/s",
        mib(figures[0]),
        objects(small_put),
        mib(figures[1]),
        objects(small_get),
        mib(figures[2]),
        mib(figures[3]),
    );
    Ok(figures)
}

async fn timed<F, Fut>(f: F) -> Result<Duration, StoreError>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<(), StoreError>>,
{
    let start = Instant::now();
    f().await?;
    Ok(start.elapsed())
}

/// Bytes that do not compress to nothing and differ between offsets.
fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1])
        .collect()
}
