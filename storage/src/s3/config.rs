//! Where an S3 store's bucket is and how to reach it: parsed from an
//! `s3://` URL, with credentials from the environment.

use ::s3::Region;
use ::s3::creds::Credentials;
use url::Url;

use crate::error::StoreError;

/// Region used when neither the URL nor `AWS_REGION` names one; AWS's
/// default, and what most S3-compatible servers accept unless configured
/// otherwise.
const DEFAULT_REGION: &str = "us-east-1";

/// How a request names its bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressingStyle {
    /// `http://endpoint/bucket/key`: what self-hosted servers (MinIO,
    /// Garage) answer without DNS set up per bucket. The default when the
    /// URL gives an endpoint.
    Path,
    /// `https://bucket.endpoint/key`: what AWS expects for new buckets.
    /// The default without an endpoint.
    VirtualHost,
}

/// An S3 store's configuration: `s3://BUCKET[?endpoint=URL][&region=NAME]
/// [&style=path|virtual]`, plus credentials.
///
/// The credentials come from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`
/// and, for temporary ones, `AWS_SESSION_TOKEN`; the region from the URL,
/// else `AWS_REGION`, else `us-east-1`. Without `endpoint`, the region's
/// AWS endpoint is used.
#[derive(Clone)]
pub struct S3Config {
    /// The bucket.
    pub bucket: String,
    /// The region name the requests are signed for.
    pub region: String,
    /// The server's base URL (`http://127.0.0.1:3900`), or `None` for AWS.
    pub endpoint: Option<String>,
    /// How requests name the bucket.
    pub style: AddressingStyle,
    pub(super) credentials: Credentials,
}

impl std::fmt::Debug for S3Config {
    /// Leaves the credentials out, so that they never reach a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Config")
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("style", &self.style)
            .finish_non_exhaustive()
    }
}

impl S3Config {
    /// Parses `url` and reads the credentials from the process environment.
    pub fn from_url(url: &str) -> Result<S3Config, StoreError> {
        S3Config::from_url_and_env(url, |name| std::env::var(name).ok())
    }

    /// Parses `url`, looking variables up with `env` (the environment, or a
    /// table in tests). Fails with [`StoreError::InvalidUrl`] naming the
    /// problem: another scheme, no bucket, a path, an unknown option, or
    /// missing credentials.
    pub fn from_url_and_env(
        url: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<S3Config, StoreError> {
        let invalid = |reason: String| StoreError::InvalidUrl {
            url: url.to_owned(),
            source: reason.into(),
        };
        let parsed = Url::parse(url).map_err(|e| invalid(format!("not a URL: {e}")))?;
        if parsed.scheme() != "s3" {
            return Err(invalid(format!(
                "the scheme is {:?}; expected s3://BUCKET?endpoint=…",
                parsed.scheme()
            )));
        }
        let bucket = parsed.host_str().unwrap_or_default().to_owned();
        if bucket.is_empty() {
            return Err(invalid("it names no bucket (s3://BUCKET)".into()));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() || parsed.port().is_some() {
            return Err(invalid(
                "credentials and ports do not belong in the bucket part; \
                 use AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY and ?endpoint="
                    .into(),
            ));
        }
        if !matches!(parsed.path(), "" | "/") || parsed.fragment().is_some() {
            return Err(invalid(format!(
                "a path ({:?}) after the bucket is not supported",
                parsed.path()
            )));
        }

        let (mut endpoint, mut region, mut style) = (None, None, None);
        for (name, value) in parsed.query_pairs() {
            match &*name {
                "endpoint" => endpoint = Some(parse_endpoint(&value).map_err(&invalid)?),
                "region" if !value.is_empty() => region = Some(value.into_owned()),
                "style" => {
                    style = Some(match &*value {
                        "path" => AddressingStyle::Path,
                        "virtual" => AddressingStyle::VirtualHost,
                        other => {
                            return Err(invalid(format!(
                                "style={other:?}; expected style=path or style=virtual"
                            )));
                        }
                    });
                }
                other => {
                    return Err(invalid(format!(
                        "unknown option {other:?}; the options are endpoint, region and style"
                    )));
                }
            }
        }
        let region = region
            .or_else(|| env("AWS_REGION").filter(|r| !r.is_empty()))
            .unwrap_or_else(|| DEFAULT_REGION.to_owned());
        let style = style.unwrap_or(if endpoint.is_some() {
            AddressingStyle::Path
        } else {
            AddressingStyle::VirtualHost
        });
        let credentials = credentials_from(&env).map_err(invalid)?;
        Ok(S3Config {
            bucket,
            region,
            endpoint,
            style,
            credentials,
        })
    }

    /// The region (and endpoint) as the client takes it.
    pub(super) fn client_region(&self) -> Result<Region, StoreError> {
        match &self.endpoint {
            Some(endpoint) => Ok(Region::Custom {
                region: self.region.clone(),
                endpoint: endpoint.clone(),
            }),
            None => self.region.parse().map_err(|e| StoreError::InvalidUrl {
                url: format!("s3://{}?region={}", self.bucket, self.region),
                source: Box::new(e),
            }),
        }
    }
}

/// An `http(s)://host[:port]` endpoint, without a trailing '/'.
fn parse_endpoint(value: &str) -> Result<String, String> {
    let endpoint = Url::parse(value).map_err(|e| format!("endpoint {value:?}: {e}"))?;
    if !matches!(endpoint.scheme(), "http" | "https") || endpoint.host_str().is_none() {
        return Err(format!(
            "endpoint {value:?} is not an http:// or https:// URL with a host"
        ));
    }
    if !matches!(endpoint.path(), "" | "/") || endpoint.query().is_some() {
        return Err(format!("endpoint {value:?} has a path or query"));
    }
    Ok(value.trim_end_matches('/').to_owned())
}

/// Credentials from the usual variables; an error naming the missing one.
fn credentials_from(env: &impl Fn(&str) -> Option<String>) -> Result<Credentials, String> {
    let var = |name: &str| env(name).filter(|v| !v.is_empty());
    let Some(access_key) = var("AWS_ACCESS_KEY_ID") else {
        return Err(
            "AWS_ACCESS_KEY_ID is not set (the S3 store reads its credentials \
                    from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN)"
                .into(),
        );
    };
    let Some(secret_key) = var("AWS_SECRET_ACCESS_KEY") else {
        return Err("AWS_SECRET_ACCESS_KEY is not set".into());
    };
    let session_token = var("AWS_SESSION_TOKEN");
    Credentials::new(
        Some(&access_key),
        Some(&secret_key),
        None,
        session_token.as_deref(),
        None,
    )
    .map_err(|e| format!("credentials: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    const KEYS: &[(&str, &str)] = &[
        ("AWS_ACCESS_KEY_ID", "GKtest"),
        ("AWS_SECRET_ACCESS_KEY", "secret"),
    ];

    fn parse(url: &str) -> Result<S3Config, StoreError> {
        S3Config::from_url_and_env(url, env(KEYS))
    }

    fn reason(url: &str) -> String {
        match parse(url) {
            Err(StoreError::InvalidUrl { source, .. }) => source.to_string(),
            other => panic!("{url} was accepted: {other:?}"),
        }
    }

    #[test]
    fn a_self_hosted_server_defaults_to_path_style() {
        let config = parse("s3://kiln-test?endpoint=http://127.0.0.1:3900&region=garage").unwrap();
        assert_eq!(config.bucket, "kiln-test");
        assert_eq!(config.region, "garage");
        assert_eq!(config.endpoint.as_deref(), Some("http://127.0.0.1:3900"));
        assert_eq!(config.style, AddressingStyle::Path);
        assert_eq!(config.credentials.access_key.as_deref(), Some("GKtest"));
        assert_eq!(config.credentials.session_token, None);
    }

    #[test]
    fn aws_defaults_to_virtual_host_style_and_the_env_region() {
        let config = S3Config::from_url_and_env(
            "s3://symbols",
            env(&[
                ("AWS_ACCESS_KEY_ID", "AK"),
                ("AWS_SECRET_ACCESS_KEY", "SK"),
                ("AWS_SESSION_TOKEN", "TOKEN"),
                ("AWS_REGION", "eu-west-1"),
            ]),
        )
        .unwrap();
        assert_eq!(config.region, "eu-west-1");
        assert_eq!(config.endpoint, None);
        assert_eq!(config.style, AddressingStyle::VirtualHost);
        assert_eq!(config.credentials.session_token.as_deref(), Some("TOKEN"));
        assert_eq!(parse("s3://symbols/").unwrap().region, DEFAULT_REGION);
    }

    #[test]
    fn style_can_be_chosen_either_way() {
        let virtual_ = parse("s3://b?endpoint=http://h:1&style=virtual").unwrap();
        assert_eq!(virtual_.style, AddressingStyle::VirtualHost);
        let path = parse("s3://b?style=path").unwrap();
        assert_eq!(path.style, AddressingStyle::Path);
    }

    #[test]
    fn bad_urls_are_refused_naming_the_problem() {
        assert!(reason("http://bucket").contains("scheme is \"http\""));
        assert!(reason("s3://").contains("no bucket"));
        assert!(reason("s3://b/prefix").contains("path"));
        assert!(reason("s3://b?endpoint=ftp://h").contains("not an http"));
        assert!(reason("s3://b?endpoint=http://h/x").contains("path or query"));
        assert!(reason("s3://b?style=sideways").contains("style=path or style=virtual"));
        assert!(reason("s3://b?bucket=x").contains("unknown option \"bucket\""));
        assert!(reason("s3://user:pw@b").contains("AWS_ACCESS_KEY_ID"));
        assert!(reason("not a url").contains("not a URL"));
    }

    #[test]
    fn missing_credentials_are_named() {
        let err = S3Config::from_url_and_env("s3://b", env(&[])).unwrap_err();
        assert!(
            std::error::Error::source(&err)
                .unwrap()
                .to_string()
                .contains("AWS_ACCESS_KEY_ID is not set"),
            "{err:?}"
        );
        let err =
            S3Config::from_url_and_env("s3://b", env(&[("AWS_ACCESS_KEY_ID", "a")])).unwrap_err();
        assert!(format!("{err:?}").contains("AWS_SECRET_ACCESS_KEY is not set"));
    }

    /// Guards that a secret never reaches a log through `Debug`.
    #[test]
    fn debug_hides_the_credentials() {
        let shown = format!("{:?}", parse("s3://b").unwrap());
        assert!(
            !shown.contains("secret") && !shown.contains("GKtest"),
            "{shown}"
        );
    }
}
