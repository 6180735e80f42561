//! Sealing a bench's stored hours as a query node does, and what it
//! leaves: a `kiln query` process over the bench's store and objects runs
//! one rollup pass as if two hours had passed (`POST
//! /api/v1/admin/rollups?now=…`), so the hours just written count as
//! settled; then a query of the whole run counts the samples back from
//! the segments.

use std::io::Read as _;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use kiln_test_support::KilnProcess;

use crate::systems::http_client;

/// What one sealing pass did and left.
#[derive(Debug, Clone, Copy)]
pub struct Sealed {
    /// Hours sealed.
    pub hours: u64,
    /// Sample rows moved out of the row store.
    pub rows: u64,
    /// Bytes of the segments written.
    pub segment_bytes: u64,
    /// How long the pass took (the query node's rollups included).
    pub seconds: f64,
    /// Samples a flamegraph of the whole run counts afterwards.
    pub queried: u64,
}

/// Where a query node finds what the bench stored.
pub struct Stores<'a> {
    /// `--store` (also `--metadata`: the tenants live there).
    pub store: &'a str,
    /// `--objects`.
    pub objects: &'a str,
    /// The operator's token the node is started with.
    pub admin_token: &'a str,
    /// A key of the bench's tenant, for the query.
    pub tenant_key: &'a str,
}

/// Starts a query node on `stores`, seals every hour up to now, and
/// counts the samples of `[from_s, to_s)` back through the query API.
pub fn seal_and_count(
    kiln: &Path,
    stores: &Stores<'_>,
    from_s: i64,
    to_s: i64,
) -> anyhow::Result<Sealed> {
    let node = KilnProcess::start(
        kiln,
        "query",
        &[
            "query",
            "--listen",
            "127.0.0.1:0",
            "--store",
            stores.store,
            "--objects",
            stores.objects,
            "--metadata",
            stores.store,
            "--admin-token",
            stores.admin_token,
            "--rollup-every",
            "0s",
        ],
    );
    let client = http_client(Duration::from_secs(1800));
    // Hours settle minutes after they end: a pass two hours on seals the
    // run's hours, the current one included.
    let later_s = now_s() + 2 * 3600;
    let started = Instant::now();
    let report = body(
        client
            .post(format!("{}/api/v1/admin/rollups?now={later_s}", node.url()))
            .header("authorization", format!("Bearer {}", stores.admin_token))
            .send_empty()?,
    )?;
    let seconds = started.elapsed().as_secs_f64();
    let report: serde_json::Value =
        serde_json::from_str(&report).with_context(|| format!("the pass answered {report}"))?;
    let field = |name: &str| {
        report[name]
            .as_u64()
            .with_context(|| format!("no {name} in the pass's report: {report}"))
    };
    anyhow::ensure!(
        report["failed"].as_array().is_some_and(Vec::is_empty),
        "the pass failed: {report}"
    );
    let collapsed = body(
        client
            .get(format!(
                "{}/api/v1/flamegraph?from={from_s}&to={to_s}&format=collapsed",
                node.url()
            ))
            .header("authorization", format!("Bearer {}", stores.tenant_key))
            .call()?,
    )?;
    Ok(Sealed {
        hours: field("sealed_hours")?,
        rows: field("sealed_rows")?,
        segment_bytes: field("segment_bytes")?,
        seconds,
        queried: collapsed_total(&collapsed)?,
    })
}

/// The body of a 200 response, else an error with it.
fn body(mut response: ureq::http::Response<ureq::Body>) -> anyhow::Result<String> {
    let mut text = String::new();
    response.body_mut().as_reader().read_to_string(&mut text)?;
    anyhow::ensure!(
        response.status() == 200,
        "HTTP {}: {text}",
        response.status()
    );
    Ok(text)
}

/// The sum of a collapsed flamegraph's counts (`a;b;c N` lines).
fn collapsed_total(collapsed: &str) -> anyhow::Result<u64> {
    collapsed
        .lines()
        .filter(|l| !l.is_empty())
        .map(|line| {
            line.rsplit_once(' ')
                .and_then(|(_, n)| n.parse::<u64>().ok())
                .with_context(|| format!("not a collapsed line: {line:?}"))
        })
        .sum()
}

fn now_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collapsed_totals_sum_every_line() {
        assert_eq!(collapsed_total("main;a 3\nmain;b 4\n").unwrap(), 7);
        assert_eq!(collapsed_total("").unwrap(), 0);
        assert!(collapsed_total("main;a x\n").is_err());
    }
}
