//! `kill -9` of `kiln up` during a stream of imports loses no import that
//! was acknowledged.

mod support;

use std::sync::mpsc;
use std::time::Duration;

use support::Server;

#[test]
fn kill9_loses_no_acknowledged_import() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let url = server.url.clone();
    let bearer = server.bearer();
    let (acks, acked) = mpsc::channel::<u32>();
    // Imports one distinct stack after another until the server dies.
    let importer = std::thread::spawn(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .build()
            .into();
        for i in 0u32.. {
            let body = format!("stream;import_{i} {}\n", i + 1);
            match agent
                .post(format!("{url}/api/v1/import?format=collapsed"))
                .header("authorization", &bearer)
                .send(body.as_bytes())
            {
                Ok(r) if r.status() == 200 => acks.send(i).unwrap(),
                _ => return,
            }
        }
    });
    // Let some imports through, then pull the plug mid-stream.
    let mut acknowledged = Vec::new();
    while acknowledged.len() < 150 {
        acknowledged.push(
            acked
                .recv_timeout(Duration::from_secs(60))
                .expect("imports go through"),
        );
    }
    server.kill9();
    importer.join().unwrap();
    acknowledged.extend(acked.try_iter());

    let server = Server::start(dir.path());
    // The restarted pipeline replays what was durable but not yet written.
    let mut lines = Vec::new();
    for _ in 0..100 {
        lines = server.collapsed("");
        if lines.len() >= acknowledged.len() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for i in &acknowledged {
        let expected = format!("stream;import_{i} {}", i + 1);
        assert!(lines.contains(&expected), "acknowledged import {i} lost");
    }
    // Nothing counted twice, and at most the one in-flight import extra.
    assert!(
        lines.len() <= acknowledged.len() + 1,
        "{} lines for {} imports",
        lines.len(),
        acknowledged.len()
    );
}
