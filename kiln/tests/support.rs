//! A `kiln up` child process for end-to-end tests, and HTTP helpers.

#![allow(
    dead_code,
    reason = "each test file uses a different part of the harness"
)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `kiln up`.
pub(crate) struct Server {
    child: Child,
    pub url: String,
    pub data_dir: PathBuf,
    /// `/login?code=…`, the one-time login link `kiln up` printed.
    login_path: Option<String>,
    /// Where it serves OTLP profiles over gRPC, as it printed (`None`:
    /// `--otlp-grpc-listen off`).
    pub otlp_grpc: Option<std::net::SocketAddr>,
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
    pub(crate) fn start(data_dir: &Path) -> Server {
        // The local agent would add this machine's samples to the exact
        // counts the tests check.
        Server::start_with(data_dir, &["--no-agent"])
    }

    /// Starts `kiln up` with `extra` flags.
    pub(crate) fn start_with(data_dir: &Path, extra: &[&str]) -> Server {
        Server::start_with_env(data_dir, extra, &[])
    }

    /// Starts `kiln up` with `extra` flags and environment variables.
    pub(crate) fn start_with_env(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        // OTLP's gRPC port is the machine's to give: tests take any free
        // one unless they name it.
        let grpc: &[&str] = match extra.contains(&"--otlp-grpc-listen") {
            true => &[],
            false => &["--otlp-grpc-listen", "127.0.0.1:0"],
        };
        let mut child = Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args(["up", "--listen", "127.0.0.1:0"])
            .args(grpc)
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
        // The login link is the next line, then the OTLP listeners.
        let login_path = lines.next().and_then(Result::ok).and_then(|line| {
            let link = line.trim().strip_prefix("login:")?.trim().to_owned();
            link.strip_prefix(&url).map(str::to_owned)
        });
        let otlp_grpc = lines.next().and_then(Result::ok).and_then(|line| {
            let listeners = line.trim().strip_prefix("otlp:")?.trim().to_owned();
            let grpc = listeners.strip_prefix("grpc ")?.split(',').next()?;
            grpc.parse().ok()
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
            otlp_grpc,
            key,
            admin_token,
        }
    }

    /// `Authorization: Bearer` with the server's own API key.
    pub(crate) fn bearer(&self) -> String {
        format!("Bearer {}", self.key)
    }

    /// A `kiln` command (`kiln import`, `kiln symbols upload`, …) that
    /// finds this server's API key and admin token the way it would on the
    /// same machine: in the server's data directory (`KILN_DATA_DIR`).
    pub(crate) fn cli(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_kiln"));
        command
            .env("KILN_LOG", "warn")
            .env("KILN_DATA_DIR", &self.data_dir)
            .env_remove("KILN_API_KEY")
            .env_remove("KILN_ADMIN_TOKEN");
        command
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The one-time login link's path and query, as `kiln up` printed it.
    pub(crate) fn login_path(&self) -> Option<&str> {
        self.login_path.as_deref()
    }

    /// Stops the server the way Ctrl-C does, and waits for it.
    pub(crate) fn stop(mut self) {
        // SAFETY: kill(2) with a pid we own and a valid signal number.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let _ = self.child.wait();
    }

    /// Kills the server with SIGKILL: no chance to flush anything.
    pub(crate) fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub(crate) fn get(&self, path_and_query: &str) -> (u16, String) {
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
    pub(crate) fn get_encoded(
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

    pub(crate) fn post(
        &self,
        path_and_query: &str,
        body: &[u8],
    ) -> Result<(u16, String), ureq::Error> {
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
    pub(crate) fn import(&self, format: &str, body: &[u8]) -> serde_json::Value {
        let (status, text) = self
            .post(&format!("/api/v1/import?format={format}"), body)
            .expect("POST import");
        assert_eq!(status, 200, "import failed: {text}");
        serde_json::from_str(&text).expect("import answers JSON")
    }

    /// Collapsed stacks of the last day, as a sorted multiset of lines.
    /// The collapsed stacks of `filter` (sorted lines), once they are
    /// `expected`: ingest is asynchronous (a route answers once batches
    /// are durable on the bus, before they are queryable). The deadline
    /// only bounds a test that would otherwise hang.
    pub(crate) fn collapsed_once(&self, filter: &str, expected: &[&str]) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let got = self.collapsed(filter);
            if got == expected {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{filter}: {got:?}, expected {expected:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Makes tenant `name` with the admin token and returns a key of it
    /// with `roles` (e.g. `"read"`, `"ingest,read"`).
    pub(crate) fn tenant_key(&self, name: &str, roles: &str) -> String {
        let (status, text) = request(
            &self.url,
            "POST",
            "/api/v1/admin/tenants",
            Some(&self.admin_token),
            &[],
            format!(r#"{{"tenant":"{name}"}}"#).as_bytes(),
        );
        assert_eq!(status, 201, "{text}");
        key_with(&self.url, &self.admin_token, name, roles).0
    }

    /// Imports each `(version, stacks)`: collapsed stacks labelled
    /// `version=VERSION`, each import accepted.
    pub(crate) fn import_versions(&self, versions: &[(&str, &str)]) {
        for (version, stacks) in versions {
            let (status, body) = self
                .post(
                    &format!("/api/v1/import?format=collapsed&version={version}"),
                    stacks.as_bytes(),
                )
                .unwrap();
            assert_eq!(status, 200, "version {version}: {body}");
        }
    }

    pub(crate) fn collapsed(&self, extra_query: &str) -> Vec<String> {
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

pub(crate) fn sorted_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

/// Sums `stack count` lines by stack, sorted.
pub(crate) fn aggregate(lines: impl IntoIterator<Item = String>) -> Vec<String> {
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
pub(crate) fn request(
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
pub(crate) fn rss(pid: u32) -> u64 {
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

/// The peak resident memory of process `pid` so far (`VmHWM`), in bytes:
/// an allocation made and freed between two readings still shows.
pub(crate) fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("VmHWM in kB");
    kb * 1024
}

/// Every route of `set` that needs a credential, as (method, path) with
/// its `{…}` segments filled: the server's own route table, so a route
/// added later is walked too.
pub(crate) fn credential_routes(set: kiln_actors::http::RouteSet) -> Vec<(String, String)> {
    kiln_actors::http::route_table(set)
        .into_iter()
        .filter(|route| route.access == kiln_actors::http::Access::Credential)
        .map(|route| (route.method.to_string(), route.example_path()))
        .collect()
}

/// `path` with one character of each segment percent-encoded in turn
/// (`/%61pi/v1/top`, `/api/%761/top`, …), and wholly encoded: the router
/// decodes them all to `path`.
pub(crate) fn percent_encoded(path: &str) -> Vec<String> {
    let mut variants = Vec::new();
    for (at, c) in path.char_indices() {
        if c != '/' && path[..at].ends_with('/') {
            variants.push(format!(
                "{}%{:02X}{}",
                &path[..at],
                c as u32,
                &path[at + 1..]
            ));
        }
    }
    let whole: String = path
        .chars()
        .map(|c| match c {
            '/' => "/".to_owned(),
            c => format!("%{:02x}", c as u32),
        })
        .collect();
    variants.push(whole);
    variants
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
pub(crate) fn key_with(base: &str, admin: &str, tenant: &str, roles: &str) -> (String, i64) {
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

pub(crate) use kiln_model::now_ns;

/// The attack suites' hostile bodies, built one way for both.
pub(crate) mod hostile {
    use kiln_model::{BatchBuilder, Frame, FrameKind, LabelSet};

    /// 512 MiB of zeros as zstd: a few KB on the wire (streamed, so the
    /// zeros are never held at once).
    pub(crate) fn zstd_bomb() -> Vec<u8> {
        zstd_bomb_of(512)
    }

    /// `mib` MiB of zeros as zstd, streamed.
    pub(crate) fn zstd_bomb_of(mib: usize) -> Vec<u8> {
        let mut encoder = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..mib {
            std::io::Write::write_all(&mut encoder, &zeros).unwrap();
        }
        encoder.finish().unwrap()
    }

    /// An encoded agent batch whose one frame has a function name `len`
    /// bytes long (built past the builder, which would cut it).
    pub(crate) fn batch_with_function_name(len: usize) -> Vec<u8> {
        let labels = LabelSet::new().with("process", "attacker");
        let mut builder = BatchBuilder::new("attacker", 1, 10_000_000);
        builder.add(1, &[Frame::named(FrameKind::Native, "x")], &labels, 1);
        let mut batch = builder.finish();
        batch.frames[0].frame = Frame::named(FrameKind::Native, "f".repeat(len));
        batch.encode()
    }

    /// An encoded agent batch with two samples of 2^63: their sum
    /// overflows a u64.
    pub(crate) fn overflowing_counts_batch() -> Vec<u8> {
        let labels = LabelSet::new().with("process", "attacker");
        let mut builder = BatchBuilder::new("attacker", 1, 10_000_000);
        let frames = [Frame::named(FrameKind::Native, "overflow")];
        let now = super::now_ns();
        builder.add(now - 1_000_000_000, &frames, &labels, 1 << 63);
        builder.add(now - 2_000_000_000, &frames, &labels, 1 << 63);
        builder.finish().encode()
    }

    /// A gzipped pprof profile whose one location has `lines` lines.
    pub(crate) fn gzipped_line_bomb(lines: usize) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::Write::write_all(&mut gz, &super::line_bomb(lines)).unwrap();
        gz.finish().unwrap()
    }
}

/// A scrape of a server's `GET /metrics`, parsed: the Prometheus text
/// format (0.0.4), checked as a scraper would read it.
#[derive(Debug)]
pub(crate) struct Exposition {
    /// Each family's `# TYPE`, by name.
    pub types: std::collections::BTreeMap<String, String>,
    /// Every sample line.
    pub samples: Vec<Sample>,
}

/// One sample line of an [`Exposition`].
#[derive(Debug, Clone)]
pub(crate) struct Sample {
    pub name: String,
    pub labels: std::collections::BTreeMap<String, String>,
    pub value: f64,
}

impl Exposition {
    /// `GET base/metrics` with no credential (as Prometheus scrapes):
    /// expects 200 and Prometheus text, and parses it (panics naming the
    /// line that does not).
    pub(crate) fn scrape(base: &str) -> Exposition {
        Exposition::scrape_with(base, None)
    }

    /// [`Exposition::scrape`] presenting `bearer` (the admin token sees
    /// tenants' names in per-tenant series; others see them hashed).
    pub(crate) fn scrape_with(base: &str, bearer: Option<&str>) -> Exposition {
        let mut request = agent().get(format!("{base}/metrics"));
        if let Some(bearer) = bearer {
            request = request.header("authorization", format!("Bearer {bearer}"));
        }
        let mut response = request.call().expect("GET /metrics");
        assert_eq!(response.status(), 200, "GET {base}/metrics");
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        assert!(
            content_type.starts_with("text/plain; version=0.0.4"),
            "{content_type}"
        );
        let mut text = String::new();
        response
            .body_mut()
            .as_reader()
            .read_to_string(&mut text)
            .expect("read /metrics");
        Exposition::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    /// Parses Prometheus text: every sample belongs to a family declared
    /// by a `# TYPE` line before it (a histogram's by its `_bucket`,
    /// `_sum` and `_count` lines), no series repeats, values are numbers,
    /// and each histogram's buckets are cumulative up to `le="+Inf"`,
    /// which equals its `_count`.
    pub(crate) fn parse(text: &str) -> Result<Exposition, String> {
        use std::collections::{BTreeMap, BTreeSet};
        let mut types: BTreeMap<String, String> = BTreeMap::new();
        let mut samples: Vec<Sample> = Vec::new();
        let mut seen = BTreeSet::new();
        for (n, line) in text.lines().enumerate() {
            let at = |what: &str| format!("line {}: {what}: {line:?}", n + 1);
            if line.is_empty() {
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').ok_or_else(|| at("TYPE"))?;
                if !is_metric_name(name) {
                    return Err(at("bad family name"));
                }
                if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                    return Err(at("unknown type"));
                }
                if samples
                    .iter()
                    .any(|s| family_of(&s.name, &types) == Some(name))
                {
                    return Err(at("TYPE after the family's samples"));
                }
                if types.insert(name.to_owned(), kind.to_owned()).is_some() {
                    return Err(at("family declared twice"));
                }
                continue;
            }
            if line.starts_with('#') {
                continue; // HELP, or a comment
            }
            let sample = parse_sample(line).map_err(|e| at(&e))?;
            if family_of(&sample.name, &types).is_none() {
                return Err(at("a sample of no declared family"));
            }
            if !seen.insert((sample.name.clone(), sample.labels.clone())) {
                return Err(at("a series repeated"));
            }
            samples.push(sample);
        }
        let exposition = Exposition { types, samples };
        exposition.check_histograms()?;
        Ok(exposition)
    }

    fn check_histograms(&self) -> Result<(), String> {
        use std::collections::BTreeMap;
        for (family, _) in self.types.iter().filter(|(_, t)| *t == "histogram") {
            let bucket = format!("{family}_bucket");
            // Per label set but `le`: its (le, count) buckets.
            let mut series: BTreeMap<Labels, Vec<(f64, f64)>> = BTreeMap::new();
            for s in self.samples.iter().filter(|s| s.name == bucket) {
                let le = s.labels.get("le").ok_or(format!("{bucket} without le"))?;
                let le: f64 = match le.as_str() {
                    "+Inf" => f64::INFINITY,
                    v => v.parse().map_err(|_| format!("{bucket}: le={v:?}"))?,
                };
                let rest = s
                    .labels
                    .iter()
                    .filter(|(k, _)| *k != "le")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                series.entry(rest).or_default().push((le, s.value));
            }
            for (labels, mut buckets) in series {
                buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
                if !buckets.windows(2).all(|w| w[0].1 <= w[1].1) {
                    return Err(format!("{family}{labels:?}: buckets not cumulative"));
                }
                let (le, top) = *buckets.last().expect("one bucket at least");
                let wanted: Vec<(&str, &str)> = labels
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                let count = self.value(&format!("{family}_count"), &wanted);
                if le != f64::INFINITY || Some(top) != count {
                    return Err(format!(
                        "{family}{labels:?}: the +Inf bucket ({top}) is not the count ({count:?})"
                    ));
                }
            }
        }
        Ok(())
    }

    /// The samples of `name` whose labels include `labels`.
    pub(crate) fn series<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
    }

    /// The value of the one series of `name` whose labels include
    /// `labels`; `None` when there is none (panics when several match).
    pub(crate) fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut matching = self.series(name, labels);
        let first = matching.next()?;
        assert!(matching.next().is_none(), "several {name}{labels:?}");
        Some(first.value)
    }

    /// The sum of the series of `name` whose labels include `labels`.
    pub(crate) fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.series(name, labels).map(|s| s.value).sum()
    }
}

/// A series' labels, `le` left out.
type Labels = Vec<(String, String)>;

fn is_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// The family a sample named `name` belongs to, among `types`.
fn family_of<'a>(
    name: &'a str,
    types: &std::collections::BTreeMap<String, String>,
) -> Option<&'a str> {
    if types.contains_key(name) {
        return Some(name);
    }
    ["_bucket", "_sum", "_count"].iter().find_map(|suffix| {
        let family = name.strip_suffix(suffix)?;
        matches!(
            types.get(family).map(String::as_str),
            Some("histogram" | "summary")
        )
        .then_some(family)
    })
}

/// `name{label="value",…} value [timestamp]`.
fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ']).ok_or("no value")?;
    let name = &line[..name_end];
    if !is_metric_name(name) {
        return Err("bad metric name".into());
    }
    let mut labels = std::collections::BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(inner) = rest.strip_prefix('{') {
        let mut chars = inner.char_indices().peekable();
        loop {
            match chars.peek() {
                Some((_, '}')) => break,
                Some(_) => {}
                None => return Err("unclosed labels".into()),
            }
            let start = chars.peek().expect("peeked").0;
            let eq = inner[start..].find('=').ok_or("label without =")? + start;
            let key = &inner[start..eq];
            if !is_metric_name(key) || key.contains(':') {
                return Err(format!("bad label name {key:?}"));
            }
            while chars.peek().is_some_and(|(i, _)| *i <= eq) {
                chars.next();
            }
            if chars.next().map(|(_, c)| c) != Some('"') {
                return Err("label value not quoted".into());
            }
            let mut value = String::new();
            loop {
                match chars.next().ok_or("unclosed label value")?.1 {
                    '"' => break,
                    '\\' => match chars.next().ok_or("dangling escape")?.1 {
                        'n' => value.push('\n'),
                        c @ ('\\' | '"') => value.push(c),
                        c => return Err(format!("bad escape \\{c}")),
                    },
                    c => value.push(c),
                }
            }
            if labels.insert(key.to_owned(), value).is_some() {
                return Err(format!("label {key} twice"));
            }
            if chars.peek().is_some_and(|(_, c)| *c == ',') {
                chars.next();
            }
        }
        let close = chars.next().expect("at the closing brace").0;
        rest = &inner[close + 1..];
    }
    let mut fields = rest
        .strip_prefix(' ')
        .ok_or("no space before the value")?
        .split(' ');
    let value = match fields.next().ok_or("no value")? {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().map_err(|_| format!("bad value {v:?}"))?,
    };
    if let Some(ts) = fields.next() {
        ts.parse::<i64>()
            .map_err(|_| format!("bad timestamp {ts:?}"))?;
    }
    if fields.next().is_some() {
        return Err("text after the timestamp".into());
    }
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// `bytes` gzip-compressed, as clients send `Content-Encoding: gzip`.
pub(crate) fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}
