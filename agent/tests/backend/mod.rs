//! A Kiln backend in the test's own process, as `kiln up` runs it (no
//! local agent: `start_embedded` never starts one), for the agent tests
//! that send to a real one. Each test adds the queries it needs in an
//! `impl Backend` of its own.

#![allow(dead_code, reason = "Each test binary uses its own part")]

use std::net::SocketAddr;
use std::process::Child;
use std::time::Duration;

use kiln_actors::{EmbeddedOptions, start_embedded};

pub(crate) struct Backend {
    pub url: String,
    /// The API key the backend made for itself (its data directory's
    /// `api-key`): what the agent sends with, and the test reads with.
    pub key: String,
    system: actix_rt::System,
    _data: tempfile::TempDir,
}

impl Backend {
    pub(crate) fn start() -> Backend {
        let data = tempfile::tempdir().unwrap();
        let mut options = EmbeddedOptions::new(
            data.path().to_owned(),
            "127.0.0.1:0".parse::<SocketAddr>().unwrap(),
        );
        options.aggregators = 1;
        options.http_workers = 1;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            actix_rt::System::new().block_on(async move {
                let running = start_embedded(options).await.expect("start the backend");
                tx.send((running.local_addr, actix_rt::System::current()))
                    .unwrap();
                let _ = running.server.await;
            })
        });
        let (addr, system) = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the backend did not start");
        let key = std::fs::read_to_string(data.path().join(kiln_actors::API_KEY_FILE))
            .expect("the backend's API key")
            .trim()
            .to_owned();
        Backend {
            url: format!("http://{addr}"),
            key,
            system,
            _data: data,
        }
    }

    /// `GET path_and_query` with the backend's key: the answer as JSON.
    pub(crate) fn get_json(&self, path_and_query: &str) -> serde_json::Value {
        let url = format!("{}{path_and_query}", self.url);
        let body = ureq::get(&url)
            .header("authorization", format!("Bearer {}", self.key))
            .call()
            .unwrap_or_else(|e| panic!("GET {url}: {e}"))
            .body_mut()
            .read_to_string()
            .unwrap();
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {url}: {e}: {body}"))
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.system.stop();
    }
}

/// Kills the child when the test ends, however it ends.
pub(crate) struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
