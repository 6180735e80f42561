//! A `kiln up` child process for end-to-end tests, and HTTP helpers.

#![allow(dead_code)] // each test file uses a different part of the harness

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `kiln up`.
pub struct Server {
    child: Child,
    pub url: String,
    pub data_dir: PathBuf,
    /// `/login?code=…`, the one-time login link `kiln up` printed.
    login_path: Option<String>,
    /// The API key `kiln up` made for itself (every role, on the default
    /// tenant and project), from `data_dir/api-key`: what [`Server::get`],
    /// [`Server::post`] and [`Server::get_encoded`] send.
    pub key: String,
    /// The operator's admin token, from `data_dir/admin-token` (or as given
    /// with `--admin-token`).
    pub admin_token: String,
}

impl Server {
    /// Starts `kiln up` on a free port with data in `data_dir`.
    pub fn start(data_dir: &Path) -> Server {
        // The local agent would add this machine's samples to the exact
        // counts the tests check.
        Server::start_with(data_dir, &["--no-agent"])
    }

    /// Starts `kiln up` with `extra` flags.
    pub fn start_with(data_dir: &Path, extra: &[&str]) -> Server {
        Server::start_with_env(data_dir, extra, &[])
    }

    /// Starts `kiln up` with `extra` flags and environment variables.
    pub fn start_with_env(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args(["up", "--listen", "127.0.0.1:0"])
            .args(extra)
            .arg("--data-dir")
            .arg(data_dir)
            .env("KILN_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start kiln up");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let url = loop {
            let line = lines
                .next()
                .expect("kiln up exited before printing its URL")
                .expect("read kiln up's output");
            if let Some(rest) = line.strip_prefix("Kiln is up: ") {
                break rest.trim_end_matches('/').to_owned();
            }
        };
        // The login link is the next line.
        let login_path = lines.next().and_then(Result::ok).and_then(|line| {
            let link = line.trim().strip_prefix("login:")?.trim().to_owned();
            link.strip_prefix(&url).map(str::to_owned)
        });
        // Keep draining stdout so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        // Both are written before the server listens, so before its URL.
        let key = read_secret(&data_dir.join(kiln_actors::API_KEY_FILE));
        // A token given (flag, then environment) is not kept in the file.
        let given = extra
            .iter()
            .position(|a| *a == "--admin-token")
            .map(|i| extra[i + 1].to_owned())
            .or_else(|| {
                env.iter()
                    .find(|(name, _)| *name == "KILN_ADMIN_TOKEN")
                    .map(|(_, value)| value.to_string())
            })
            .or_else(|| std::env::var("KILN_ADMIN_TOKEN").ok());
        let admin_token =
            given.unwrap_or_else(|| read_secret(&data_dir.join(kiln_actors::ADMIN_TOKEN_FILE)));
        Server {
            child,
            url,
            data_dir: data_dir.to_owned(),
            login_path,
            key,
            admin_token,
        }
    }

    /// `Authorization: Bearer` with the server's own API key.
    pub fn bearer(&self) -> String {
        format!("Bearer {}", self.key)
    }

    /// A `kiln` command (`kiln import`, `kiln symbols upload`, …) that
    /// finds this server's API key and admin token the way it would on the
    /// same machine: in the server's data directory (`KILN_DATA_DIR`).
    pub fn cli(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_kiln"));
        command
            .env("KILN_LOG", "warn")
            .env("KILN_DATA_DIR", &self.data_dir)
            .env_remove("KILN_API_KEY")
            .env_remove("KILN_ADMIN_TOKEN");
        command
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The one-time login link's path and query, as `kiln up` printed it.
    pub fn login_path(&self) -> Option<&str> {
        self.login_path.as_deref()
    }

    /// Stops the server the way Ctrl-C does, and waits for it.
    pub fn stop(mut self) {
        // SAFETY: kill(2) with a pid we own and a valid signal number.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let _ = self.child.wait();
    }

    /// Kills the server with SIGKILL: no chance to flush anything.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn get(&self, path_and_query: &str) -> (u16, String) {
        let mut response = agent()
            .get(format!("{}{path_and_query}", self.url))
            .header("authorization", self.bearer())
            .call()
            .expect("GET");
        let status = response.status().as_u16();
        let mut body = String::new();
        response
            .body_mut()
            .as_reader()
            .read_to_string(&mut body)
            .expect("read body");
        (status, body)
    }

    /// GETs `path_and_query` with `Accept-Encoding: accept_encoding` and
    /// returns the status, the `Content-Encoding` and the body as sent.
    pub fn get_encoded(
        &self,
        path_and_query: &str,
        accept_encoding: &str,
    ) -> (u16, Option<String>, Vec<u8>) {
        let mut response = agent()
            .get(format!("{}{path_and_query}", self.url))
            .header("authorization", self.bearer())
            .header("accept-encoding", accept_encoding)
            .call()
            .expect("GET");
        let status = response.status().as_u16();
        let coding = response
            .headers()
            .get("content-encoding")
            .map(|v| v.to_str().expect("ASCII header").to_owned());
        let mut body = Vec::new();
        response
            .body_mut()
            .as_reader()
            .read_to_end(&mut body)
            .expect("read body");
        (status, coding, body)
    }

    pub fn post(&self, path_and_query: &str, body: &[u8]) -> Result<(u16, String), ureq::Error> {
        let mut response = agent()
            .post(format!("{}{path_and_query}", self.url))
            .header("authorization", self.bearer())
            .send(body)?;
        let status = response.status().as_u16();
        let mut text = String::new();
        response.body_mut().as_reader().read_to_string(&mut text)?;
        Ok((status, text))
    }

    /// Imports `body`, expecting success.
    pub fn import(&self, format: &str, body: &[u8]) -> serde_json::Value {
        let (status, text) = self
            .post(&format!("/api/v1/import?format={format}"), body)
            .expect("POST import");
        assert_eq!(status, 200, "import failed: {text}");
        serde_json::from_str(&text).expect("import answers JSON")
    }

    /// Collapsed stacks of the last day, as a sorted multiset of lines.
    pub fn collapsed(&self, extra_query: &str) -> Vec<String> {
        let (status, body) = self.get(&format!(
            "/api/v1/flamegraph?from=now-1d&format=collapsed{extra_query}"
        ));
        assert_eq!(status, 200, "{body}");
        sorted_lines(&body)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A secret `kiln up` keeps in its data directory, trimmed.
fn read_secret(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| {
            panic!(
                "kiln up is serving, yet {} cannot be read: {e}",
                path.display()
            )
        })
        .trim()
        .to_owned()
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into()
}

pub fn sorted_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

/// Sums `stack count` lines by stack, sorted.
pub fn aggregate(lines: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut sums = std::collections::BTreeMap::<String, u64>::new();
    for line in lines {
        let (stack, count) = line.rsplit_once(' ').expect("stack count");
        *sums.entry(stack.to_owned()).or_default() += count.parse::<u64>().expect("count");
    }
    sums.into_iter().map(|(s, n)| format!("{s} {n}")).collect()
}

/// One request to `base` (a server's URL): `headers` besides the bearer,
/// `body` for methods that take one (POST, PUT). Returns the status and
/// the body's text. Timeout: 60 s.
pub fn request(
    base: &str,
    method: &str,
    path: &str,
    bearer: Option<&str>,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    let url = format!("{base}{path}");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into();
    let mut headers: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if let Some(bearer) = bearer {
        headers.push(("authorization".into(), format!("Bearer {bearer}")));
    }
    let result = match method {
        "GET" | "HEAD" | "DELETE" => {
            let mut request = match method {
                "GET" => agent.get(&url),
                "HEAD" => agent.head(&url),
                _ => agent.delete(&url),
            };
            for (k, v) in &headers {
                request = request.header(k, v);
            }
            request.call()
        }
        _ => {
            let mut request = match method {
                "POST" => agent.post(&url),
                _ => agent.put(&url),
            };
            for (k, v) in &headers {
                request = request.header(k, v);
            }
            request.send(body)
        }
    };
    let mut response = result.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let status = response.status().as_u16();
    let mut text = String::new();
    let _ = response.body_mut().as_reader().read_to_string(&mut text);
    (status, text)
}

/// Resident memory of a process, in bytes.
pub fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmRSS in kB");
    kb * 1024
}

/// A pprof `Profile` whose one location has `lines` lines: a few bytes
/// each on the wire, a struct each once parsed.
fn line_bomb(lines: usize) -> Vec<u8> {
    fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    fn field(tag: u64, bytes: &[u8], out: &mut Vec<u8>) {
        varint(tag << 3 | 2, out);
        varint(bytes.len() as u64, out);
        out.extend_from_slice(bytes);
    }
    let mut location = vec![0x08, 0x01]; // id = 1
    let line = [0x08, 0x01, 0x10, 0x01]; // function_id = 1, line = 1
    for _ in 0..lines {
        field(4, &line, &mut location);
    }
    let mut profile = Vec::new();
    // sample_type: {type: 1, unit: 2}
    field(1, &[0x08, 0x01, 0x10, 0x02], &mut profile);
    // sample: {location_id: [1], value: [1]}
    field(2, &[0x0a, 0x01, 0x01, 0x12, 0x01, 0x01], &mut profile);
    field(4, &location, &mut profile);
    // function: {id: 1, name: 3}
    field(5, &[0x08, 0x01, 0x10, 0x03], &mut profile);
    for s in ["", "samples", "count", "f"] {
        field(6, s.as_bytes(), &mut profile);
    }
    profile
}

/// A new key of `tenant` with `roles`, made with the admin token `admin`
/// through the server at `base`: the key and its id.
pub fn key_with(base: &str, admin: &str, tenant: &str, roles: &str) -> (String, i64) {
    let (status, text) = request(
        base,
        "POST",
        &format!("/api/v1/admin/tenants/{tenant}/keys"),
        Some(admin),
        &[],
        format!(r#"{{"roles":"{roles}","label":"attack suite"}}"#).as_bytes(),
    );
    assert_eq!(status, 201, "{text}");
    let answer: serde_json::Value = serde_json::from_str(&text).unwrap();
    (
        answer["key"].as_str().unwrap().to_owned(),
        answer["id"].as_i64().unwrap(),
    )
}

/// Nanoseconds since the Unix epoch, now.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

/// The attack suites' hostile bodies, built one way for both.
pub mod hostile {
    use kiln_model::{BatchBuilder, Frame, FrameKind, LabelSet};

    /// 512 MiB of zeros as zstd: a few KB on the wire (streamed, so the
    /// zeros are never held at once).
    pub fn zstd_bomb() -> Vec<u8> {
        let mut encoder = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..512 {
            std::io::Write::write_all(&mut encoder, &zeros).unwrap();
        }
        encoder.finish().unwrap()
    }

    /// An encoded agent batch whose one frame has a function name `len`
    /// bytes long (built past the builder, which would cut it).
    pub fn batch_with_function_name(len: usize) -> Vec<u8> {
        let labels = LabelSet::new().with("process", "attacker");
        let mut builder = BatchBuilder::new("attacker", 1, 10_000_000);
        builder.add(1, &[Frame::named(FrameKind::Native, "x")], &labels, 1);
        let mut batch = builder.finish();
        batch.frames[0].frame = Frame::named(FrameKind::Native, "f".repeat(len));
        batch.encode()
    }

    /// An encoded agent batch with two samples of 2^63: their sum
    /// overflows a u64.
    pub fn overflowing_counts_batch() -> Vec<u8> {
        let labels = LabelSet::new().with("process", "attacker");
        let mut builder = BatchBuilder::new("attacker", 1, 10_000_000);
        let frames = [Frame::named(FrameKind::Native, "overflow")];
        let now = super::now_ns();
        builder.add(now - 1_000_000_000, &frames, &labels, 1 << 63);
        builder.add(now - 2_000_000_000, &frames, &labels, 1 << 63);
        builder.finish().encode()
    }

    /// A gzipped pprof profile whose one location has `lines` lines.
    pub fn gzipped_line_bomb(lines: usize) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::Write::write_all(&mut gz, &super::line_bomb(lines)).unwrap();
        gz.finish().unwrap()
    }
}
