//! Subcommands that talk to a running Kiln over HTTP: `import` and
//! `flamegraph`, and the HTTP helpers `kiln symbols upload` shares.

use std::io::{Read, Write};
use std::path::Path;

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};
use kiln_formats::Format;
use ureq::Agent;

use crate::cli::{FlamegraphArgs, ImportArgs, ImportFormat, OutputFormat, ServerArg};

/// A running Kiln and the credential every request to it carries.
#[derive(Debug, Clone)]
pub(crate) struct Server {
    agent: Agent,
    base: String,
    bearer: Option<String>,
}

impl Server {
    /// The server of `arg`, with its `--api-key` or else the key a local
    /// `kiln up` keeps ([`kiln_actors::API_KEY_FILE`]).
    pub(crate) fn with_api_key(arg: &ServerArg) -> anyhow::Result<Server> {
        let bearer = match &arg.api_key {
            Some(key) => Some(key.clone()),
            None => local_secret(kiln_actors::API_KEY_FILE)?,
        };
        Ok(Server::with_bearer(arg, bearer))
    }

    /// The server of `arg`, presenting `bearer` (an API key or the admin
    /// token).
    pub(crate) fn with_bearer(arg: &ServerArg, bearer: Option<String>) -> Server {
        Server {
            agent: agent(),
            base: arg.server.clone(),
            bearer,
        }
    }

    /// The server's URL, for messages.
    pub(crate) fn name(&self) -> &str {
        &self.base
    }

    /// `base + path?query`.
    pub(crate) fn url(&self, path: &str, query: &[(&str, &str)]) -> String {
        url(&self.base, path, query)
    }

    fn authorize<B>(&self, request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.bearer {
            Some(bearer) => request.header("Authorization", format!("Bearer {bearer}")),
            None => request,
        }
    }

    pub(crate) fn get(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> ureq::RequestBuilder<ureq::typestate::WithoutBody> {
        self.authorize(self.agent.get(self.url(path, query)))
    }

    pub(crate) fn delete(&self, path: &str) -> ureq::RequestBuilder<ureq::typestate::WithoutBody> {
        self.authorize(self.agent.delete(self.url(path, &[])))
    }

    pub(crate) fn post(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
        self.authorize(self.agent.post(self.url(path, query)))
    }

    pub(crate) fn put(&self, path: &str) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
        self.authorize(self.agent.put(self.url(path, &[])))
    }

    /// This server's symbol store, with the same credential.
    pub(crate) fn symbol_client(&self) -> kiln_symbolizer_workers::SymbolClient {
        // A large debug file over a slow link: minutes.
        let timeout = std::time::Duration::from_secs(30 * 60);
        kiln_symbolizer_workers::SymbolClient::new(&self.base, self.bearer.as_deref(), timeout)
    }
}

/// A secret a local `kiln up` keeps in its data directory (`file`), when
/// this machine has one: `KILN_DATA_DIR`, else the user's data directory.
pub(crate) fn local_secret(file: &str) -> anyhow::Result<Option<String>> {
    let dir = match std::env::var_os("KILN_DATA_DIR") {
        Some(dir) => std::path::PathBuf::from(dir),
        None => match crate::up::default_data_dir() {
            Ok(dir) => dir,
            Err(_) => return Ok(None),
        },
    };
    let path = dir.join(file);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(text.trim().to_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// An HTTP agent that hands 4xx/5xx answers back as responses, so that the
/// server's error message can be shown.
pub(crate) fn agent() -> Agent {
    Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

/// Builds `base + path?query`, percent-encoding the values.
pub(crate) fn url(server: &str, path: &str, query: &[(&str, &str)]) -> String {
    let mut url = format!("{}{path}", server.trim_end_matches('/'));
    for (i, (name, value)) in query.iter().enumerate() {
        url.push(if i == 0 { '?' } else { '&' });
        url.push_str(&encode(name));
        url.push('=');
        url.push_str(&encode(value));
    }
    url
}

fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The error message of a failed response: the server's `{"error": …}`
/// when it sent one.
pub(crate) fn failure(status: u16, body: &str) -> anyhow::Error {
    let message = serde_json_error(body).unwrap_or_else(|| body.trim().to_owned());
    anyhow::anyhow!("server answered {status}: {message}")
}

fn serde_json_error(body: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(body).ok()?;
    Some(value.get("error")?.as_str()?.to_owned())
}

pub(crate) fn import(args: ImportArgs) -> anyhow::Result<()> {
    let server = Server::with_api_key(&args.server)?;
    each_file(&args.files, "import", |path| {
        import_one(&server, &args, path)
    })
}

/// Runs `one` on every file, printing a line per file (its summary, or
/// its error on stderr); fails, after all of them, when any failed.
pub(crate) fn each_file(
    files: &[std::path::PathBuf],
    verb: &str,
    mut one: impl FnMut(&Path) -> anyhow::Result<String>,
) -> anyhow::Result<()> {
    let mut failed = 0;
    for path in files {
        match one(path) {
            Ok(summary) => println!("{}: {summary}", path.display()),
            Err(e) => {
                eprintln!("{}: {e:#}", path.display());
                failed += 1;
            }
        }
    }
    if failed > 0 {
        bail!("{failed} of {} files failed to {verb}", files.len());
    }
    Ok(())
}

fn import_one(server: &Server, args: &ImportArgs, path: &Path) -> anyhow::Result<String> {
    let body = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let format = match args.format {
        ImportFormat::Auto => Format::detect(&body),
        ImportFormat::Collapsed => Format::Collapsed,
        ImportFormat::PerfScript => Format::PerfScript,
        ImportFormat::Pprof => Format::Pprof,
    };
    let format_name = format.to_string();
    let frequency = args.frequency.map(|hz| hz.to_string());
    let mut query = vec![("format", format_name.as_str())];
    if let Some(hz) = &frequency {
        query.push(("frequency", hz));
    }
    for (name, value) in &args.labels {
        query.push((name, value));
    }
    let text = send_with_progress(
        server.post("/api/v1/import", &query),
        &body,
        format!("uploading {} ({format_name})", path.display()),
        server.name(),
    )?;
    Ok(text.trim().to_owned())
}

/// A progress bar of sending `len` bytes, shown after `message`.
pub(crate) fn progress_bar(len: usize, message: String) -> ProgressBar {
    let bar = ProgressBar::new(len as u64).with_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_message(message);
    bar
}

/// Sends `body` with `request` (a POST or a PUT) as an octet stream,
/// showing its progress after `message`; the response's text when the
/// server answers 200, else the error it explained.
pub(crate) fn send_with_progress(
    request: ureq::RequestBuilder<ureq::typestate::WithBody>,
    body: &[u8],
    message: String,
    server: &str,
) -> anyhow::Result<String> {
    let bar = progress_bar(body.len(), message);
    let mut reader = bar.wrap_read(body);
    let mut response = request
        .header("Content-Type", "application/octet-stream")
        .send(ureq::SendBody::from_reader(&mut reader))
        .with_context(|| format!("sending to {server}"))?;
    bar.finish_and_clear();
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    if status != 200 {
        return Err(failure(status, &text));
    }
    Ok(text)
}

pub(crate) fn flamegraph(args: FlamegraphArgs) -> anyhow::Result<()> {
    let format = match args.format {
        OutputFormat::Collapsed => "collapsed",
        OutputFormat::Json => "json",
    };
    let mut query = vec![
        ("from", args.from.as_str()),
        ("to", args.to.as_str()),
        ("format", format),
    ];
    for (name, value) in &args.filters {
        query.push((name, value));
    }
    let server = Server::with_api_key(&args.server)?;
    let mut response = server
        .get("/api/v1/flamegraph", &query)
        .call()
        .with_context(|| format!("asking {}", server.name()))?;
    let status = response.status().as_u16();
    let mut body = Vec::new();
    response
        .body_mut()
        .as_reader()
        .read_to_end(&mut body)
        .context("reading the answer")?;
    if status != 200 {
        return Err(failure(status, &String::from_utf8_lossy(&body)));
    }
    std::io::stdout().lock().write_all(&body)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_encode_values() {
        assert_eq!(
            url(
                "http://h/",
                "/p",
                &[("from", "now-1h"), ("process", "a b&c")]
            ),
            "http://h/p?from=now-1h&process=a%20b%26c"
        );
    }

    #[test]
    fn server_errors_are_unwrapped() {
        let e = failure(400, r#"{"error":"line 3: bad count"}"#);
        assert_eq!(e.to_string(), "server answered 400: line 3: bad count");
    }
}
